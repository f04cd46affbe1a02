package pipeline

import (
	"testing"
	"time"
)

// SetPauseAfter sets, until tb ends, how long a partition's worker may go
// without asking for a record before its reader is closed.
func SetPauseAfter(tb testing.TB, d time.Duration) {
	old := pauseAfter
	pauseAfter = d
	tb.Cleanup(func() { pauseAfter = old })
}

// SetReplayIdle sets, until tb ends, how long a replay waits for a record
// before it asks whether the log still holds the rest of its range.
func SetReplayIdle(tb testing.TB, d time.Duration) {
	old := replayIdle
	replayIdle = d
	tb.Cleanup(func() { replayIdle = old })
}

// SetCheckTopicAgain sets, until tb ends, how long the start-up check of
// the dead-letter topic waits before asking again for a topic the broker
// did not know.
func SetCheckTopicAgain(tb testing.TB, d time.Duration) {
	old := checkTopicAgain
	checkTopicAgain = d
	tb.Cleanup(func() { checkTopicAgain = old })
}

// SetPinRefresh sets, until tb ends, the age at which a scheduled run
// commits start_offset latest pins again, in place of half the brokers'
// offsets.retention.minutes: kfake expires offsets after milliseconds only
// through a setting of its own (offset.retention.ms), which floe does not
// read.
func SetPinRefresh(tb testing.TB, d time.Duration) {
	old := pinRefresh
	pinRefresh = d
	tb.Cleanup(func() { pinRefresh = old })
}
