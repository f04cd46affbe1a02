package main

import (
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// reportProgress reports done() out of total records until the returned stop is
// called: a bar with rate and ETA on a terminal (stderr), a log line every
// logEvery elsewhere, so CI and log collectors get one line per step, not
// a stream of carriage returns. stop draws or logs the final state.
func reportProgress(log *slog.Logger, what string, total int64, done func() int64) (stop func()) {
	return progressTo(os.Stderr, isTerminal(os.Stderr), 10*time.Second, log, what, total, done)
}

func progressTo(w io.Writer, tty bool, logEvery time.Duration, log *slog.Logger, what string, total int64, done func() int64) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	started := time.Now()
	report := func() {
		d := min(done(), total)
		el := time.Since(started)
		rate := float64(d) / max(el.Seconds(), 1e-3)
		args := []any{"done", d, "total", total, "rate_per_s", int64(rate)}
		if total > 0 {
			args = append(args, "percent", float64(int(1000*float64(d)/float64(total)))/10)
		}
		if rate > 0 && d < total {
			// In float seconds: the Duration overflowed past 292 years
			// (a run far behind and nearly stalled printed a negative one).
			if s := float64(total-d) / rate; s < float64(math.MaxInt64)/float64(time.Second) {
				args = append(args, "eta", time.Duration(s*float64(time.Second)).Round(time.Second))
			} else {
				args = append(args, "eta", "over 292 years")
			}
		}
		log.Info(what, args...)
	}
	if !tty {
		go func() {
			defer close(finished)
			t := time.NewTicker(logEvery)
			defer t.Stop()
			for {
				select {
				case <-quit:
					report()
					return
				case <-t.C:
					report()
				}
			}
		}()
		return func() { close(quit); <-finished }
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rec"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionOnCompletion(func() { io.WriteString(w, "\n") }),
	)
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				_ = bar.Set64(min(done(), total))
				if done() < total {
					io.WriteString(w, "\n")
				}
				return
			case <-t.C:
				_ = bar.Set64(min(done(), total))
			}
		}
	}()
	return func() { close(quit); <-finished }
}
