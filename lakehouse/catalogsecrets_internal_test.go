package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// TestSentTokensBounded: the bearer tokens of the Authorization headers a
// REST catalog's client sends are kept, each once, the last
// maxSentTokens of them (a token refreshed all along does not grow the
// list), and other schemes are not taken for tokens.
func TestSentTokensBounded(t *testing.T) {
	var tokens sentTokens
	for i := range 20 {
		tokens.add(fmt.Sprintf("Bearer t%d", i))
		tokens.add(fmt.Sprintf("Bearer t%d", i))
	}
	tokens.add("bearer  t12 ") // again, now the latest
	tokens.add("Basic ZmxvZTpwdw==")
	tokens.add("AWS4-HMAC-SHA256 Credential=x, Signature=y")
	tokens.add("Bearer ")
	tokens.add("")
	want := []string{"t13", "t14", "t15", "t16", "t17", "t18", "t19", "t12"}
	if got := tokens.with(nil); !slices.Equal(got, want) {
		t.Errorf("kept %q, want %q", got, want)
	}
	var none *sentTokens
	none.add("Bearer t")
	if got := none.with([]string{"s"}); !slices.Equal(got, []string{"s"}) {
		t.Errorf("a nil list gave %q", got)
	}
}

// TestScrubCatalogTablesScrubFSErrors: a table a scrubbed catalog returns
// has its file system's errors scrubbed too: a REST catalog's vended
// credentials are refreshed at the catalog (iceberg-go's "refresh vended
// credentials for ...: <the catalog's refusal>"), and the refusal may
// echo the bearer token. Before, the table kept iceberg-go's FS as it
// came, and the error of a flush writing data files was not scrubbed.
func TestScrubCatalogTablesScrubFSErrors(t *testing.T) {
	md, err := table.NewMetadata(iceberg.NewSchema(0), iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "file:///tmp/t", nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens := new(sentTokens)
	tokens.add("Bearer issued-t0ken")
	sentinel := errors.New("refused")
	c := scrubCatalog{secrets: []string{"s3cret"}, tokens: tokens}
	tbl, err := c.own(table.New([]string{"db", "t"}, md, "file:///tmp/t/m.json", func(context.Context) (icebergio.IO, error) {
		return nil, fmt.Errorf("refresh vended credentials for file:///tmp/t: %w: Bearer issued-t0ken, s3cret", sentinel)
	}, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tbl.FS(t.Context())
	if err == nil || strings.Contains(err.Error(), "t0ken") || strings.Contains(err.Error(), "s3cret") || !errors.Is(err, sentinel) {
		t.Errorf("got %v, want the FS error scrubbed, its chain kept", err)
	}
}
