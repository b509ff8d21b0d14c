package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var errBroken = errors.New("broken")

// untilCancelled is a task body that runs until its context ends and returns ret then.
func untilCancelled(ret error) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		if ret == nil {
			return ctx.Err()
		}
		return ret
	}
}

func TestGroupStopsEveryTaskAndJoinsTheirErrors(t *testing.T) {
	g := &Group{Name: "demo", Tasks: []Task{
		{Name: "relay of lane 0", Run: untilCancelled(nil)},
		{Name: "relay of lane 1", Run: untilCancelled(errBroken)},
		{Name: "relay of lane 2", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
	}, OnExit: func(int, error) { t.Error("OnExit called while stopping") }}
	if err := g.Stop(t.Context()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if g.Started() {
		t.Fatal("Started before Start")
	}
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !g.Started() {
		t.Fatal("not Started after Start")
	}
	if err := g.Start(t.Context()); err == nil || err.Error() != "demo: already started" {
		t.Fatalf("second Start: %v", err)
	}
	err := g.Stop(t.Context())
	if !errors.Is(err, errBroken) || err.Error() != "demo: relay of lane 1: broken" {
		t.Fatalf("Stop: %v", err)
	}
}

func TestGroupSingleTaskErrorsCarryTheGroupName(t *testing.T) {
	g := &Group{Name: "relay", Tasks: []Task{{Run: untilCancelled(errBroken)}}}
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(t.Context()); err == nil || err.Error() != "relay: broken" {
		t.Fatalf("Stop: %v", err)
	}
}

func TestGroupReportsATaskThatEndsBeforeStop(t *testing.T) {
	exited := make(chan error, 1)
	g := &Group{Name: "bridge", Tasks: []Task{{Name: "engine 7", Run: func(context.Context) error { return errBroken }}},
		OnExit: func(i int, err error) {
			if i != 0 {
				t.Errorf("OnExit for task %d", i)
			}
			exited <- err
		}}
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; !errors.Is(err, errBroken) {
		t.Fatalf("OnExit got %v", err)
	}
	if err := g.Stop(t.Context()); err == nil || err.Error() != "bridge: engine 7: broken" {
		t.Fatalf("Stop: %v", err)
	}
}

func TestGroupStopGivesUpWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		g := &Group{Name: "indexer", Tasks: []Task{
			{Name: "query service", Waiting: "the query service", Run: untilCancelled(nil)},
			{Name: "lanes", Waiting: "the lanes", Run: func(context.Context) error { <-release; return nil }},
		}}
		if err := g.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := g.Stop(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "indexer: stopping the lanes: context deadline exceeded" {
			t.Fatalf("Stop: %v", err)
		}
		close(release)
		synctest.Wait()
	})
}

// TestDriverExitStatus: a drive that ends exits 0, one that fails prints its error and exits 1,
// and one interrupted by Stop neither prints nor exits (the application is stopping already).
func TestDriverExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name      string
		drive     func(context.Context) error
		interrupt bool
		exit      int // -1: exit not called
		out       string
	}{
		{"done", func(context.Context) error { return nil }, false, 0, ""},
		{"failed", func(context.Context) error { return errors.New("no lanes") }, false, 1, "demo failed: no lanes\n"},
		{"interrupted", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, true, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			exited := make(chan int, 1)
			g := Driver("demo", "the load", &out, tc.drive, func(code int) { exited <- code })
			if err := g.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !tc.interrupt {
				if code := <-exited; code != tc.exit {
					t.Fatalf("exit %d, want %d", code, tc.exit)
				}
			}
			if err := g.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-exited:
				if tc.exit < 0 {
					t.Fatalf("exit %d after an interrupted drive", code)
				}
			default:
			}
			if out.String() != tc.out {
				t.Fatalf("printed %q, want %q", out.String(), tc.out)
			}
		})
	}
}
