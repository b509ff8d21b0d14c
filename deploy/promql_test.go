package deploy_test

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// metricNames returns the metric names an expression selects, sorted and without duplicates.
//
// It is a tokenizer, not a parser (the promql parser would pull the whole Prometheus module into
// the service's go.mod): it scans identifiers and drops what cannot be a metric name: string
// literals, label matchers ({...}), range and subquery durations ([...]), numbers and durations,
// function names (an identifier followed by "("), keywords, aggregation operators and operators
// spelled as words, label
// lists after by/without/on/ignoring/group_left/group_right, and Grafana variables ($name,
// ${name}, [$__rate_interval]). A selector written {__name__="x"} is read as x.
func metricNames(expr string) []string {
	var names []string
	i := 0
	next := func() (byte, bool) {
		for i < len(expr) && isSpace(expr[i]) {
			i++
		}
		if i < len(expr) {
			return expr[i], true
		}
		return 0, false
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case isSpace(c):
			i++
		case c == '#': // comment to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '{':
			end := closing(expr, i, '{', '}')
			names = append(names, nameMatchers(expr[i+1:end])...)
			i = end + 1
		case c == '[':
			i = closing(expr, i, '[', ']') + 1
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				i = closing(expr, i, '{', '}') + 1
				continue
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case isDigit(c) || (c == '.' && i+1 < len(expr) && isDigit(expr[i+1])):
			// a number (1, 0.05, 1e3, 0x1f) or a duration (5m, 1h30m): digits, letters and dots
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.' || ((expr[i] == '+' || expr[i] == '-') && (expr[i-1] == 'e' || expr[i-1] == 'E'))) {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
			word := expr[start:i]
			lower := strings.ToLower(word)
			if labelListKeywords[lower] {
				if c, ok := next(); ok && c == '(' {
					i = closing(expr, i, '(', ')') + 1
				}
				continue
			}
			if keywords[lower] {
				continue
			}
			if c, ok := next(); ok && c == '(' {
				continue // a function call (aggregations included: sum(...), count_values(...))
			}
			names = append(names, word)
		default:
			i++
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// labelListKeywords take a parenthesized list of label names, which are not metric names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// keywords are the words of PromQL that are not metric names wherever they stand: set and
// comparison modifiers, offset, the number words, and the aggregation operators, which may be
// followed by a by/without clause before their "(" (sum by (lane) (...)).
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "start": true, "end": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// nameMatchers returns the metric names of __name__ equality matchers in a label matcher list.
func nameMatchers(list string) []string {
	var out []string
	for _, m := range strings.Split(list, ",") {
		k, v, ok := strings.Cut(m, "=")
		if !ok || strings.TrimSpace(k) != "__name__" || strings.HasPrefix(v, "~") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 {
			out = append(out, v[1:len(v)-1])
		}
	}
	return out
}

// skipString returns the index after the string literal that starts at i (quotes escaped with a
// backslash, except in raw `...` strings).
func skipString(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1
		}
	}
	return len(s)
}

// closing returns the index of the bracket that closes the one at i, skipping string literals;
// len(s)-1 when it is missing.
func closing(s string, i int, open, close byte) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			j = skipString(s, j) - 1
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(s) - 1
}

func isSpace(c byte) bool      { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdent(c byte) bool      { return isIdentStart(c) || isDigit(c) }

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`ckf_indexer_lane_ready == 0`, []string{"ckf_indexer_lane_ready"}},
		{`sum by (job, instance) (increase(ckf_relay_dead_letters_total[10m])) > 0
		  or sum without (lane) (increase(ckf_query_dead_letters_total{path="kafka"}[10m])) > 0`,
			[]string{"ckf_query_dead_letters_total", "ckf_relay_dead_letters_total"}},
		{`histogram_quantile(0.99, sum by (le, path) (rate(ckf_query_latency_seconds_bucket[5m])))`,
			[]string{"ckf_query_latency_seconds_bucket"}},
		{`(sum by (path) (rate(ckf_query_replies_total{status!="ok", path=~"k.*"}[5m])) / ignoring(status) group_left(path) x) > 0.05`,
			[]string{"ckf_query_replies_total", "x"}},
		{`rate(a_total[$__rate_interval]) * on(instance) group_right b offset 5m + 1e-3 * c bool`,
			[]string{"a_total", "b", "c"}},
		{`{__name__="named_by_matcher", job="x"} + count_values("value", d) + max_over_time(e[1h:5m])`,
			[]string{"d", "e", "named_by_matcher"}},
		{`label_replace(f, "dst", "$1", "src", "(.*)") and on() vector(1) unless g # trailing comment h`,
			[]string{"f", "g"}},
		{`sum(rate(ckf_x_total{instance=~"${instance}"}[1m])) by (lane)`, []string{"ckf_x_total"}},
		{`clamp_min(0x1f, 2) + 1.5 + Inf + NaN`, nil},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
