package lakehouse

import (
	"testing"
	"time"
)

// SetCompactAges sets, until tb ends, how long compaction writes groups
// before it commits them and the age of outputs it refuses to commit.
func SetCompactAges(tb testing.TB, commit, refuse time.Duration) {
	c, r := compactCommitAge, compactMaxAge
	compactCommitAge, compactMaxAge = commit, refuse
	tb.Cleanup(func() { compactCommitAge, compactMaxAge = c, r })
}
