package settings

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/pkg/option"
)

// Load reads the command line args and the environment env into a Config:
// each setting from its flag, else its FLOODGATE_* variable, else the
// first reference variable that sets it, else (-config) the image's
// default, else its default. It refuses the reference variables floodgate
// cannot honour, all at once, and settings that need others; its errors
// name the flag and the variable that set it. Config.Notes say what was
// overridden or accepted with a difference worth knowing. For -h and -help
// it returns flag.ErrHelp.
func Load(args []string, env Lookup) (*Config, error) {
	c := &Config{}
	fs := flagSet(c, env)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.Command.Args = fs.Args()
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c.checkArgument(fs, given)
	overrides, err := c.fromEnv(fs, env, given)
	if err != nil {
		return nil, err
	}
	c.Rules.PathFrom = c.From["config"]
	if given["config"] {
		c.Rules.PathFrom = "-config"
	}
	c.Notes = append(c.Notes, overrides...)
	if err := c.checkReference(env); err != nil {
		return nil, err
	}
	c.resolve()
	c.noteRuntime(env)
	c.noteServerCA(env)
	if err := c.check(fs); err != nil {
		return c, c.Explain(err)
	}
	return c, checkKinds(env)
}

// checkArgument takes -check's one argument, the rule path, as -config.
func (c *Config) checkArgument(fs *flag.FlagSet, given map[string]bool) {
	if !c.Command.Check || len(c.Command.Args) != 1 || given["config"] {
		return
	}
	fs.Set("config", c.Command.Args[0]) // a string: it cannot fail
	given["config"], c.Command.Args = true, nil
}

// fromEnv sets each flag not given on the command line from the first
// variable that sets it (Setting.sources), and -config, when nothing did,
// from FLOODGATE_DEFAULT_CONFIG, recording it in c.From. It returns a note
// for each variable set but overridden.
func (c *Config) fromEnv(fs *flag.FlagSet, env Lookup, given map[string]bool) (overrides []string, err error) {
	c.From = map[string]string{}
	for i := range Table {
		s := &Table[i]
		if s.Command {
			continue
		}
		winner := ""
		if given[s.Flag] {
			winner = "-" + s.Flag
		}
		seen := map[string]bool{}
		for _, src := range s.sources() {
			v, name, ok := src(env)
			if !ok || seen[name] {
				continue
			}
			seen[name] = true
			if winner != "" {
				overrides = append(overrides, fmt.Sprintf("%s overrides %s=%s", winner, name, s.shown(v)))
				continue
			}
			if e := fs.Set(s.Flag, v); e != nil {
				return nil, fmt.Errorf("%s=%q (for -%s): %w", name, s.shown(v), s.Flag, e)
			}
			winner, c.From[s.Flag] = name, name
		}
	}
	if !given["config"] && c.From["config"] == "" {
		if v, name, ok := imageDefault(env, ReferenceDefaultDir); ok {
			fs.Set("config", v) // a string: it cannot fail
			c.From["config"] = name
		}
	}
	return overrides, nil
}

// sources are the variables that set s, in precedence order: its own,
// then the reference server's.
func (s *Setting) sources() []envSource {
	srcs := []envSource{envVar(floodgateVar(s.Flag))}
	for i := range References {
		if References[i].Flag == s.Flag {
			srcs = append(srcs, References[i].from())
		}
	}
	return srcs
}

// shown is v as a message may quote it: a credential hidden, a URL's
// password redacted.
func (s *Setting) shown(v string) string {
	if s.Secret {
		return "***"
	}
	return store.RedactURL(v)
}

// resolve turns settings as the reference spells them into what the
// packages take: DogStatsD implies statsd over UDP (plain statsd: TCP); an
// xDS backoff random factor of 0 means no jitter. The rule loader asks the
// store which limits it serves, so that others are refused at load.
func (c *Config) resolve() {
	c.Rules.Options.Supports = c.Store.Supports
	st := &c.Statsd
	st.On = st.On || st.Options.DogStatsD
	if st.Options.Network == "" {
		st.Options.Network = "tcp"
		if st.Options.DogStatsD {
			st.Options.Network = "udp"
		}
	}
	if c.Rules.XDSOptions.BackoffRandomFactor == 0 {
		c.Rules.XDSOptions.NoJitter = true
	}
}

// Find returns the setting of flag (without the dash), or nil.
func Find(flag string) *Setting {
	i := slices.IndexFunc(Table, func(s Setting) bool { return s.Flag == flag })
	if i < 0 {
		return nil
	}
	return &Table[i]
}

// Explain words err, a package's *option.Error, with the flags that land
// in its fields and the variables that set them: "-near-limit-ratio 2:
// want a number between 0 and 1 (set by NEAR_LIMIT_RATIO)", wrapping err.
// Other errors, and those that name no setting, are returned as they are
// (Load's already name theirs).
func (c *Config) Explain(err error) error {
	e, ok := err.(*option.Error)
	if !ok {
		return err
	}
	var flags []string
	msg := e.Message(func(field string) string {
		s := settingOf(e.Options, field)
		if s == nil {
			return e.Options + "." + field
		}
		flags = append(flags, s.Flag)
		return "-" + s.Flag
	})
	if len(flags) == 0 {
		return err
	}
	return c.settingError(msg, flags, err)
}

// settingError returns msg, followed by the variables that set flags, as
// an error wrapping err.
func (c *Config) settingError(msg string, flags []string, err error) error {
	var vars []string
	for _, f := range flags {
		if v, ok := c.From[f]; ok && !slices.Contains(vars, v) {
			vars = append(vars, v)
		}
	}
	if len(vars) > 0 {
		msg += " (set by " + strings.Join(vars, ", ") + ")"
	}
	return &settingError{msg: msg, err: err}
}

// settingError is an error worded with the flags and variables behind it,
// wrapping the original.
type settingError struct {
	msg string
	err error
}

func (e *settingError) Error() string { return e.msg }
func (e *settingError) Unwrap() error { return e.err }

// settingOf returns the first setting that lands in field of the options
// type typ ("envoy.Options", "NearLimitRatio"), or nil.
func settingOf(typ, field string) *Setting {
	for i := range Table {
		if p, t, f := Table[i].option(); p+"."+t == typ && f == field {
			return &Table[i]
		}
	}
	return nil
}

// StartFormat is the log format args and env ask for, read before they
// are parsed, so that an error in them is reported in it: json when
// -log-format or its variables say so, else text.
func StartFormat(args []string, env Lookup) LogFormat {
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
		if a == args[i] || a == "" {
			break // the first positional argument ends the flags
		}
		name, v, hasValue := strings.Cut(a, "=")
		if name != "log-format" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			v = args[i+1]
		}
		return formatName(v)
	}
	for _, name := range Find("log-format").Vars() {
		if v, ok := env(name); ok && v != "" {
			return formatName(v)
		}
	}
	return "text"
}

func formatName(v string) LogFormat {
	if strings.EqualFold(v, "json") {
		return "json"
	}
	return "text"
}
