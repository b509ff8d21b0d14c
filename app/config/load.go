package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// EnvPrefix starts the name of every configuration variable.
const EnvPrefix = "CKF_"

// EnvConfigFile names the configuration file when --config is not given.
const EnvConfigFile = "CKF_CONFIG"

// envAliases are second names of a field's variable, read before (so overridden by) its CKF_
// name. KAFKA_BROKERS is the name the test broker scripts, docker-compose and franz-go's
// examples use.
var envAliases = map[string][]string{
	"kafka.brokers": {"KAFKA_BROKERS"},
}

// Sources are where Load reads the configuration besides the defaults.
type Sources struct {
	// Args are the command-line arguments after the subcommand: --config PATH and one flag per
	// field, named by the field's path (--http.listen=127.0.0.1:0). A boolean flag needs no
	// value (--kafka.tls.enabled); turning one off takes the = form (--kafka.create_topics=false).
	Args []string
	// FlagSet, when not nil, receives the configuration flags next to the caller's own and
	// parses Args; its Args() are then the positional arguments left over. When nil, Load uses
	// a FlagSet of its own that rejects positional arguments.
	FlagSet *flag.FlagSet
	// LookupEnv reads an environment variable. Nil means os.LookupEnv. A variable set to the
	// empty string counts as unset.
	LookupEnv func(key string) (string, bool)
	// Warn, when set, receives one line per warning: a variable of the process environment that
	// starts with CKF_ and that LookupEnv also sees, but that no setting reads (a misspelling,
	// which would otherwise leave the default silently in force), with the closest setting's
	// variable. Kubernetes service links (CKF_X_SERVICE_HOST, CKF_X_PORT...) are not reported.
	Warn func(msg string)
}

// FlagError is a command-line flag that could not be parsed: an unknown flag, a bad value, or
// -h (errors.Is(err, flag.ErrHelp)). Err is the flag package's error.
type FlagError struct{ Err error }

// Error renders "config: flags: <the flag package's message>".
func (e *FlagError) Error() string { return "config: flags: " + e.Err.Error() }

// Unwrap returns the flag package's error.
func (e *FlagError) Unwrap() error { return e.Err }

// Load builds the configuration from the defaults, the optional file, the environment and the
// flags, in that order of precedence (see the package documentation), resolves the topic names
// and validates the result. A flag parse error is a *FlagError wrapping the flag package's
// error (errors.Is(err, flag.ErrHelp) for -h); every other error matches ErrInvalid and names the field. When only
// validation fails, Load returns the loaded configuration along with the error; otherwise it
// returns the zero Config on error.
func Load(src Sources) (Config, error) {
	fs := src.FlagSet
	if fs == nil {
		fs = flag.NewFlagSet("processor", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
	}
	lookup := src.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var set []flagSetting
	file := addFlags(fs, &set)
	if err := fs.Parse(src.Args); err != nil {
		return Config{}, &FlagError{Err: err}
	}
	if src.FlagSet == nil && fs.NArg() > 0 {
		return Config{}, &FieldError{Field: "flags", Reason: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}

	if src.Warn != nil {
		for _, w := range UnknownVariables(os.Environ(), lookup) {
			src.Warn(w)
		}
	}
	cfg := defaultConfig()
	path := *file
	if path == "" {
		path, _ = lookupNonEmpty(lookup, EnvConfigFile)
	}
	if path != "" {
		if err := decodeFile(path, &cfg); err != nil {
			return Config{}, err
		}
	}
	root := reflect.ValueOf(&cfg).Elem()
	for _, f := range fieldTable() {
		for _, name := range f.env {
			if s, ok := lookupNonEmpty(lookup, name); ok {
				if err := setString(root.FieldByIndex(f.index), s); err != nil {
					return Config{}, &FieldError{Field: f.path, Reason: fmt.Sprintf("%s=%q: %v", name, s, err), Err: err}
				}
			}
		}
	}
	for _, s := range set {
		if err := setString(root.FieldByIndex(s.field.index), s.value); err != nil {
			return Config{}, &FieldError{Field: s.field.path, Reason: fmt.Sprintf("--%s=%q: %v", s.field.path, s.value, err), Err: err}
		}
	}
	cfg.resolve()
	return cfg, cfg.Validate()
}

func lookupNonEmpty(lookup func(string) (string, bool), key string) (string, bool) {
	s, ok := lookup(key)
	return s, ok && s != ""
}

// decodeFile decodes a YAML or JSON file (JSON is YAML) onto cfg, so the file's keys override
// the defaults and the keys it leaves out keep them. Unknown keys are errors: a misspelt key
// would otherwise leave its default silently in force. A list may be written as one string, as
// in a variable or flag (brokers: a:9092,b:9092). Every problem is its own *FieldError, one per
// line of the joined error, with the file's line number; a bare number where a duration belongs
// says which duration to write instead (60 -> 60s).
func decodeFile(path string, cfg *Config) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return &FieldError{Field: "file " + path, Reason: err.Error(), Err: err}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return &FieldError{Field: "file " + path, Reason: err.Error(), Err: err}
	}
	if doc.Kind == 0 {
		return nil // an empty file
	}
	var probs []error
	adaptNode(&doc, reflect.TypeFor[Config](), "", path, &probs)
	// Decoding the adapted node (adaptNode has reported unknown keys) keeps the file's lines.
	if err := doc.Decode(cfg); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return &FieldError{Field: "file " + path, Reason: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
		}
		for _, msg := range te.Errors {
			probs = append(probs, &FieldError{Field: "file " + path, Reason: msg, Err: err})
		}
		return errors.Join(probs...)
	}
	return errors.Join(probs...)
}

// adaptNode walks a decoded YAML node against the Config type t at path: a scalar where a list
// of strings belongs becomes the list its commas separate, and a bare number where a duration
// belongs is a problem that names the duration to write.
func adaptNode(n *yaml.Node, t reflect.Type, path, file string, probs *[]error) {
	switch {
	case n.Kind == yaml.DocumentNode:
		for _, c := range n.Content {
			adaptNode(c, t, path, file, probs)
		}
	case t == stringsType && n.Kind == yaml.ScalarNode && n.Tag != "!!null":
		items := strings.Split(n.Value, ",")
		*n = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: n.Line, Column: n.Column}
		for _, it := range items {
			if it = strings.TrimSpace(it); it != "" {
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: it, Line: n.Line})
			}
		}
	case t == durationType && n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float"):
		*probs = append(*probs, &FieldError{Field: path, Reason: fmt.Sprintf(
			"file %s line %d: %s is not a duration: write it with a unit, like %ss (units ns, us, ms, s, m, h)",
			file, n.Line, n.Value, n.Value)})
		*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line} // reported; decode the rest
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, known := n.Content[i].Value, false
			for j := range t.NumField() {
				name, _, _ := strings.Cut(t.Field(j).Tag.Get("yaml"), ",")
				if name == key && name != "-" {
					known = true
					adaptNode(n.Content[i+1], t.Field(j).Type, strings.TrimPrefix(path+"."+key, "."), file, probs)
				}
			}
			if !known {
				// Unknown keys are errors: a misspelt key would leave its default silently in force.
				where := ""
				if path != "" {
					where = " in " + path
				}
				*probs = append(*probs, &FieldError{Field: "file " + file, Reason: fmt.Sprintf("line %d: unknown key %q%s",
					n.Content[i].Line, key, where)})
				n.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
			}
		}
	}
}

// field is one leaf of Config: a value a file key, a variable and a flag can set.
type field struct {
	path  string // indexer.verification_window
	env   []string
	index []int
	typ   reflect.Type
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	laneMapType  = reflect.TypeFor[LaneMap]()
	stringsType  = reflect.TypeFor[[]string]()
)

// fieldTable lists every leaf of Config in declaration order.
var fieldTable = sync.OnceValue(func() []field {
	var out []field
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			path := prefix + name
			idx := append(append([]int(nil), index...), i)
			if sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, path+".", idx)
				continue
			}
			env := append(append([]string(nil), envAliases[path]...),
				EnvPrefix+strings.ToUpper(strings.ReplaceAll(path, ".", "_")))
			out = append(out, field{path: path, env: env, index: idx, typ: sf.Type})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
})

// setString parses s into v, a leaf of Config, in the syntax of variables and flags.
func setString(v reflect.Value, s string) error {
	if sp, ok := v.Addr().Interface().(interface{ parseSetting(string) error }); ok {
		return sp.parseSetting(s) // a type with its own syntax (regions.go)
	}
	switch v.Type() {
	case durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration (like 250ms, 30s or 1m)")
		}
		v.SetInt(int64(d))
		return nil
	case laneMapType:
		m, err := parseLaneMap(s)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(m))
		return nil
	case stringsType:
		var list []string
		for _, item := range strings.Split(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("not a boolean (true or false)")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 0, v.Type().Bits())
		if err != nil {
			return errors.New("not an integer")
		}
		v.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			return errors.New("not an unsigned 64-bit integer (decimal or 0x hex)")
		}
		v.SetUint(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return errors.New("not a number")
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported field type %s", v.Type())
	}
	return nil
}

// flagSetting is one configuration flag as given, applied after the file and the environment.
type flagSetting struct {
	field field
	value string
}

type fieldFlag struct {
	field field
	set   *[]flagSetting
}

func (f fieldFlag) String() string { return "" }

func (f fieldFlag) Set(s string) error {
	// Parse now, into a scratch value, so that the flag package reports a bad value at once;
	// keep the text to apply in order after the file and the environment.
	if err := setString(reflect.New(f.field.typ).Elem(), s); err != nil {
		return err
	}
	*f.set = append(*f.set, flagSetting{f.field, s})
	return nil
}

func (f fieldFlag) IsBoolFlag() bool { return f.field.typ.Kind() == reflect.Bool }

// addFlags registers --config and one flag per configuration field on fs. Parsed flags are
// appended to *set in command-line order; the returned pointer receives --config's value.
func addFlags(fs *flag.FlagSet, set *[]flagSetting) *string {
	file := fs.String("config", "", "YAML or JSON configuration `file` (else $"+EnvConfigFile+")")
	for _, f := range fieldTable() {
		fs.Var(fieldFlag{f, set}, f.path, "sets "+f.path+" (env "+strings.Join(f.env, " or ")+")")
	}
	return file
}

// Fields describes every configuration field for help output: its path (the file key and flag
// name), its variables, its default rendered as a variable would set it, and its one-line
// description with the commands that use it (empty for a field the table in describe.go lacks,
// which TestEveryFieldIsDescribed reports).
func Fields() []FieldInfo {
	def := reflect.ValueOf(Default())
	var out []FieldInfo
	for _, f := range fieldTable() {
		d, _ := Describe(f.path)
		out = append(out, FieldInfo{Path: f.path, Env: f.env, Default: render(def.FieldByIndex(f.index)),
			Description: d.Text, UsedBy: d.UsedBy})
	}
	return out
}

// FieldInfo describes one configuration field; see Fields.
type FieldInfo struct {
	Path    string
	Env     []string
	Default string
	// Description is one line saying what the setting is (Description.Text).
	Description string
	// UsedBy are the commands that read the setting (Description.UsedBy).
	UsedBy []string
}

func render(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String()
	case []string:
		return strings.Join(x, ",")
	case LaneMap:
		return x.String()
	case Secret:
		return x.String()
	case uint64:
		if x > 1<<32 {
			return fmt.Sprintf("%#x", x)
		}
	}
	return fmt.Sprint(v.Interface())
}

// UnknownVariables returns a warning for each CKF_ variable of environ (KEY=VALUE entries) that
// lookup also sees and that is not a setting's variable, CKF_CONFIG or a Kubernetes service link,
// naming the closest setting variable when one is within three edits.
func UnknownVariables(environ []string, lookup func(string) (string, bool)) []string {
	known := map[string]bool{EnvConfigFile: true}
	for _, f := range fieldTable() {
		for _, e := range f.env {
			known[e] = true
		}
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || known[name] || serviceLink(name) {
			continue
		}
		if _, ok := lookup(name); !ok {
			continue
		}
		msg := name + " is not the variable of any setting and is ignored"
		if near := closest(name, known); near != "" {
			msg += " (did you mean " + near + "?)"
		}
		out = append(out, msg+`; "processor help config" lists the variables`)
	}
	return out
}

// serviceLink reports whether name is one of the variables Kubernetes sets for a Service in the
// pod's namespace (a Service "ckf-indexer" gives CKF_INDEXER_SERVICE_HOST, CKF_INDEXER_PORT, ...).
func serviceLink(name string) bool {
	return strings.HasSuffix(name, "_SERVICE_HOST") || strings.Contains(name, "_SERVICE_PORT") ||
		strings.HasSuffix(name, "_PORT") || strings.Contains(name, "_PORT_")
}

// closest returns the name of known nearest to name by edit distance, if within three edits.
func closest(name string, known map[string]bool) string {
	best, bestD := "", 4
	for k := range known {
		if d := editDistance(name, k); d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
