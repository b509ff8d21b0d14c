// Package lifecycle runs a component's long-lived work between an fx application's start and
// stop: each task on a goroutine of its own from Start, cancelled and awaited by Stop within fx's
// stop context. The relay, the indexer, the bridge, the load generator and the demo share it, so
// that they start, report a task that ends on its own, and stop the same way.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Task is one function a Group runs from Start until Stop cancels its context.
type Task struct {
	// Name follows the group's name in the task's errors ("relay of lane 3" gives "demo: relay of
	// lane 3: ..."); empty for a group's only task ("relay: ...").
	Name string
	// Waiting names what Stop waits for in its time-out error ("the relays" gives "demo: stopping
	// the relays: context deadline exceeded"); empty gives "relay: stopping: ...".
	Waiting string
	// Run does the work until ctx ends; an error that is context.Canceled is a clean stop.
	Run func(ctx context.Context) error
}

// Group runs its tasks between Start and Stop. Its methods fit fx.Hook's OnStart and OnStop.
type Group struct {
	// Name prefixes every error: "<Name>: already started", "<Name>: <task>: <error>".
	Name string
	// Tasks run concurrently; Stop waits for them in this order.
	Tasks []Task
	// OnExit, when set, is called on a task's goroutine when Tasks[i] returns before Stop (err
	// may be nil): the component logs it and stops the application.
	OnExit func(i int, err error)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   []chan error
}

// Start runs every task on a goroutine of its own, with a context that only Stop cancels, and
// returns at once. A second Start is an error.
func (g *Group) Start(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil {
		return fmt.Errorf("%s: already started", g.Name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make([]chan error, len(g.Tasks))
	for i, t := range g.Tasks {
		done := make(chan error, 1)
		g.done[i] = done
		go func() {
			err := t.Run(ctx)
			done <- err
			if ctx.Err() == nil && g.OnExit != nil {
				g.OnExit(i, err)
			}
		}()
	}
	return nil
}

// Stop cancels the tasks and waits for each, in order, within ctx. It returns the tasks' errors
// other than context.Canceled, joined, or a time-out error as soon as ctx ends first. Stop before
// Start does nothing.
func (g *Group) Stop(ctx context.Context) error {
	g.mu.Lock()
	cancel, done := g.cancel, g.done
	g.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	var errs []error
	for i, t := range g.Tasks {
		select {
		case err := <-done[i]:
			if err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", g.prefix(t), err))
			}
		case <-ctx.Done():
			waiting := ""
			if t.Waiting != "" {
				waiting = " " + t.Waiting
			}
			return fmt.Errorf("%s: stopping%s: %w", g.Name, waiting, ctx.Err())
		}
	}
	return errors.Join(errs...)
}

// Started reports whether Start has run.
func (g *Group) Started() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cancel != nil
}

func (g *Group) prefix(t Task) string {
	if t.Name == "" {
		return g.Name
	}
	return g.Name + ": " + t.Name
}

// Driver is the Group of a command that runs one piece of work from the application's start and
// then ends the application (processor demo, processor replay): drive runs once; its error is
// printed to out as "<name> failed: <err>", and exit receives 0 or 1. A drive interrupted by Stop
// is the application stopping already: nothing is printed and exit is not called.
func Driver(name, waiting string, out io.Writer, drive func(context.Context) error, exit func(code int)) *Group {
	return &Group{Name: name, Tasks: []Task{{Waiting: waiting, Run: func(ctx context.Context) error {
		code := 0
		if err := drive(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintln(out, name+" failed:", err)
			code = 1
		}
		exit(code)
		return nil
	}}}}
}
