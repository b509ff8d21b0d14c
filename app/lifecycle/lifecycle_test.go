package lifecycle

import (
	"context"
	"errors"
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
