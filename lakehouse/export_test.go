package lakehouse

import (
	"testing"
	"time"
)

// SetCompactAges sets, until tb ends, how long compaction writes groups
// before it commits them and the age of written files no commit commits.
func SetCompactAges(tb testing.TB, commit, refuse time.Duration) {
	c, r := compactCommitAge, uncommittedMaxAge
	compactCommitAge, uncommittedMaxAge = commit, refuse
	tb.Cleanup(func() { compactCommitAge, uncommittedMaxAge = c, r })
}

// SetCatalogCallTimeout sets, until tb ends, how long one table load,
// commit or creation may take.
func SetCatalogCallTimeout(tb testing.TB, d time.Duration) {
	old := catalogCallTimeout
	catalogCallTimeout = d
	tb.Cleanup(func() { catalogCallTimeout = old })
}

// SetOutcomeTimeout sets, until tb ends, how long a stopped caller still
// looks for its commit's outcome.
func SetOutcomeTimeout(tb testing.TB, d time.Duration) {
	old := outcomeTimeout
	outcomeTimeout = d
	tb.Cleanup(func() { outcomeTimeout = old })
}

// SetVerifySpillRows sets, until tb ends, how many rows Verify holds in
// memory before it moves them to its spill files.
func SetVerifySpillRows(tb testing.TB, n int) {
	old := verifySpillRows
	verifySpillRows = n
	tb.Cleanup(func() { verifySpillRows = old })
}
