// Command floe reads a Kafka topic through a consumer group and commits it,
// exactly once, to an Apache Iceberg table. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Signals are caught before anything else runs, so a SIGTERM that
	// arrives during start-up is a graceful stop too.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// The first signal stops floe gracefully; a second one kills it (Go's
	// default once the signals are no longer caught), for a stop held up
	// by a hung call.
	context.AfterFunc(ctx, stop)
	root := rootCmd()
	err := root.ExecuteContext(ctx)
	signalled := ctx.Err() != nil // stop cancels ctx too
	stop()
	if err != nil && signalled && errors.Is(err, context.Canceled) {
		// Say why: "context canceled" alone reads as a failure of its own.
		err = fmt.Errorf("%v: stopped before it finished: %w", context.Cause(ctx), err)
	}
	if err != nil {
		if asJSON, _ := root.PersistentFlags().GetBool("log-json"); asJSON {
			// The last line of a JSON log, too.
			slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("floe: "+err.Error(), "exit_code", exitCode(err))
		} else {
			fmt.Fprintln(os.Stderr, "floe:", err)
		}
		os.Exit(exitCode(err))
	}
}
