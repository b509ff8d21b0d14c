// Command processor is ckf-stream's single binary. Subcommands:
//
//	demo   connect to Kafka (or start the embedded broker), create the product's topic layout
//	       and report it. The relay, indexer and query paths join the demo as they are built.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ckf-stream/ckf-stream/app"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "processor:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cmd := "demo"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "demo":
		return demo()
	case "help", "-h", "--help":
		fmt.Println("usage: processor demo")
		return nil
	default:
		return fmt.Errorf("unknown subcommand %q (try: processor help)", cmd)
	}
}

func demo() error {
	cfg, err := app.Load()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cluster, err := app.OpenCluster(cfg)
	if err != nil {
		return err
	}
	defer cluster.Close()
	fmt.Println("ckf-stream: using", cluster.Describe())

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.Brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := app.EnsureTopics(tctx, cl, cfg.Topics); err != nil {
		return err
	}
	details, err := kadm.NewClient(cl).ListTopics(tctx)
	if err != nil {
		return err
	}
	fmt.Println("topic layout:")
	for _, spec := range app.TopicLayout(cfg.Topics) {
		fmt.Printf("  %-22s %2d partitions\n", spec.Name, len(details[spec.Name].Partitions))
	}
	return nil
}
