package lakehouse_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/thrift/lib/go/thrift"
	"github.com/beltran/gohive/hive_metastore"

	"github.com/floe-dev/floe/lakehouse"
)

// metastore answers get_table as a Hive Metastore: "iceberg" is an Iceberg
// table, and so is "slow", after 1.5 s; "hang" is never answered; any
// other name does not exist. (A real metastore runs in
// TestInteropCatalogs; this one answers fast enough to race calls.)
type metastore struct {
	hive_metastore.ThriftHiveMetastore
	hang chan struct{} // closed: get_table of "hang" returns
}

func (m metastore) GetTable(ctx context.Context, db, name string) (*hive_metastore.Table, error) {
	switch name {
	case "iceberg":
		return &hive_metastore.Table{DbName: db, TableName: name, Parameters: map[string]string{"table_type": "ICEBERG"}}, nil
	case "hang":
		<-m.hang
	case "slow": // a loaded metastore
		time.Sleep(1500 * time.Millisecond)
		return &hive_metastore.Table{DbName: db, TableName: name, Parameters: map[string]string{"table_type": "ICEBERG"}}, nil
	}
	return nil, &hive_metastore.NoSuchObjectException{Message: "no such table"}
}

func startMetastore(t *testing.T) (uri string, m metastore) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sock, err := thrift.NewTServerSocket(addr)
	if err != nil {
		t.Fatal(err)
	}
	m = metastore{hang: make(chan struct{})}
	srv := thrift.NewTSimpleServer4(hive_metastore.NewThriftHiveMetastoreProcessor(m), sock,
		thrift.NewTBufferedTransportFactory(4096), thrift.NewTBinaryProtocolFactoryDefault())
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { close(m.hang); srv.Stop() })
	return "thrift://" + addr, m
}

// TestHiveCatalogConcurrentCalls: one Hive catalog called from several
// goroutines at once, as a table's flusher, maintenance and schema
// evolution call it in `floe run`, answers each call its own answer, and a
// call the metastore never answers ends at its context's deadline without
// holding the catalog from the calls after it. iceberg-go's Hive catalog shares one Thrift
// connection, whose client is not safe for concurrent use: the calls read
// one another's answers, then all waited for ever, deadlines ignored (and
// still did with type: Hive, which skipped the guard); a call never
// answered read for ever, and every call after it failed.
func TestHiveCatalogConcurrentCalls(t *testing.T) {
	// Any case: type is matched as iceberg-go matches it.
	for _, typ := range []string{"hive", "Hive"} {
		t.Run(typ, func(t *testing.T) {
			uri, _ := startMetastore(t)
			cat, err := lakehouse.OpenCatalog(t.Context(), map[string]string{"type": typ, "uri": uri})
			if err != nil {
				t.Fatal(err)
			}
			// Before the metastore stops: it waits for its connections to end.
			t.Cleanup(func() { cat.(io.Closer).Close() })
			var wg sync.WaitGroup
			errs := make(chan error, 4*100)
			for g := range 4 {
				wg.Go(func() {
					for i := range 100 {
						name, want := "iceberg", true
						if (g+i)%2 == 1 {
							name, want = "other", false
						}
						ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
						ok, err := cat.CheckTableExists(ctx, catalog.ToIdentifier("db", name))
						cancel()
						if err != nil || ok != want {
							errs <- fmt.Errorf("db.%s exists: %v, %v; want %v", name, ok, err, want)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			// A call the metastore never answers ends at its deadline, and
			// does not hold the catalog: the next call gets its answer (on a
			// new connection). It held it for as long as floe ran.
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			_, err = cat.CheckTableExists(ctx, catalog.ToIdentifier("db", "hang"))
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("db.hang exists: %v, want the deadline", err)
			}
			ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
			ok, err := cat.CheckTableExists(ctx, catalog.ToIdentifier("db", "iceberg"))
			cancel()
			if err != nil || !ok {
				t.Fatalf("db.iceberg exists after a call that hung: %v, %v; want true", ok, err)
			}
		})
	}
}

// TestHiveCallWithoutDeadlineWaitsForASlowAnswer: a call whose context has
// no deadline (floe creates a table's namespace with the run's) waits for
// a metastore that takes longer than the connection's read timeout to
// answer. It failed after that second with "i/o timeout": Thrift reads
// past a read timeout only for a context with a deadline, and the one the
// catalog gives such a call did not reach the Thrift client.
func TestHiveCallWithoutDeadlineWaitsForASlowAnswer(t *testing.T) {
	uri, _ := startMetastore(t)
	cat, err := lakehouse.OpenCatalog(t.Context(), map[string]string{"type": "hive", "uri": uri})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.(io.Closer).Close() })
	ok, err := cat.CheckTableExists(context.Background(), catalog.ToIdentifier("db", "slow"))
	if err != nil || !ok {
		t.Fatalf("db.slow exists: %v, %v; want true (the metastore answers in 1.5 s)", ok, err)
	}
}
