package testenv

import (
	"testing"
	"time"
)

// WaitUntil polls cond until it holds and fails t after timeout with what (and each detail's
// account of the state, when given). It is the project's one wait helper: tests wait for a
// condition that an event makes true, never for a fixed time, and a test that checks that
// something did NOT happen first waits here for an event proving the system got past the point
// where it would have happened. It polls every 5 ms in tests and every 200 µs in benchmarks,
// which time the wait.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	poll := 5 * time.Millisecond
	if _, timed := t.(*testing.B); timed {
		poll = 200 * time.Microsecond
	}
	WaitUntilEvery(t, poll, timeout, what, cond, detail...)
}

// WaitUntilEvery is WaitUntil with an explicit polling period, for a condition that is costly to
// evaluate (an HTTP scrape of another process, say).
func WaitUntilEvery(t testing.TB, poll, timeout time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			for _, d := range detail {
				msg += ": " + d()
			}
			t.Fatalf("%s: not within %v%s", what, timeout, msg)
		}
		time.Sleep(poll) // the polling period, not a wait for an outcome
	}
}
