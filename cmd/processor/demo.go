package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/ckf-stream/ckf-stream/app/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"
)

func runDemo(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	cfg, code, ok := load(flag.NewFlagSet("demo", flag.ContinueOnError), args, stderr, lookupEnv)
	if !ok {
		return code
	}
	code, err := app.Run(app.New(cfg, demoModule(stdout), logTo(stderr)))
	if err != nil {
		fmt.Fprintln(stderr, "processor: demo:", err)
	}
	return code
}

// logTo sends the process log to w (standard error in main; a buffer in tests).
func logTo(w io.Writer) fx.Option {
	return fx.Supply(fx.Annotate(zapcore.Lock(zapcore.AddSync(w)), fx.As(new(zapcore.WriteSyncer))))
}

// demoModule prints the cluster and the topic layout once the Kafka module has ensured it, then
// stops the application. The relay, indexer and query paths join here as they are built.
func demoModule(out io.Writer) fx.Option {
	return fx.Module("demo", fx.Invoke(func(lc fx.Lifecycle, conn *kafka.Connection, sd fx.Shutdowner) {
		lc.Append(fx.StartHook(func(ctx context.Context) error {
			if err := printLayout(ctx, out, conn); err != nil {
				return err
			}
			// Run-once: stop as soon as everything has started (exit status 0).
			return sd.Shutdown()
		}))
	}))
}

func printLayout(ctx context.Context, out io.Writer, conn *kafka.Connection) error {
	cl, err := conn.NewClient("demo")
	if err != nil {
		return err
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("demo: list topics: %w", err)
	}
	fmt.Fprintln(out, "ckf-stream: using", conn.Cluster.Describe())
	fmt.Fprintln(out, "topic layout:")
	for _, spec := range kafka.TopicLayout(conn.Topics) {
		fmt.Fprintf(out, "  %-22s %2d partitions\n", spec.Name, len(details[spec.Name].Partitions))
	}
	return nil
}
