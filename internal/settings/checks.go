package settings

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/internal/tlsclient"
)

// check refuses settings that need others, and what concerns how the
// binary was called; then each package that is on says whether it takes
// its options, so that a bad value stops the start (and floodgate check)
// before anything opens. The range checks are the packages'. Tracing is
// always asked: its variables are refused whenever they are wrong. The
// first refusal stops the rest (some read files); no check changes c, so
// the list may take the Options' values before any runs.
func (c *Config) check(fs *flag.FlagSet) error {
	for _, check := range []func() error{
		func() error { return c.checkXDS(fs) }, c.checkGRPCTLS,
		func() error { return c.checkPrometheus(fs) }, func() error { return c.checkCapture(fs) }, c.checkCommand,
		c.Store.Validate, c.Service.Validate, c.Server.Validate, c.Tracing.Options.Validate,
		when(c.RLQS.On, c.RLQS.Options.Validate), when(bool(c.Rules.XDS), c.Rules.XDSOptions.Validate),
		when(c.Statsd.On, c.Statsd.Options.Validate), when(c.Capture.Path != "", c.Capture.Options.Validate),
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// when returns validate for a part that is on, and a check that passes
// for one off.
func when(on bool, validate func() error) func() error {
	if !on {
		return func() error { return nil }
	}
	return validate
}

// refuse returns the refusal whose message is format with a %s for each of
// flags, written -flag, and the variables that set them (see Explain).
func (c *Config) refuse(format string, flags ...string) error {
	names := make([]any, len(flags))
	for i, f := range flags {
		names[i] = "-" + f
	}
	return c.settingError(fmt.Sprintf(format, names...), flags, nil)
}

// FlagError returns err as an error of the setting of flag (without the
// dash): "-flag: err" and the variables that set it, wrapping err.
func (c *Config) FlagError(flag string, err error) error {
	return c.settingError("-"+flag+": "+err.Error(), []string{flag}, err)
}

// listOf is the format of a list of n flags: "%s, %s, %s".
func listOf(n int) string {
	return strings.TrimSuffix(strings.Repeat("%s, ", n), ", ")
}

// changed returns the flags of fs with prefix whose values differ from
// their defaults, in -h's order.
func changed(fs *flag.FlagSet, prefix string) []string {
	var names []string
	for i := range Table {
		s := &Table[i]
		if f := fs.Lookup(s.Flag); strings.HasPrefix(s.Flag, prefix) && f.Value.String() != f.DefValue {
			names = append(names, s.Flag)
		}
	}
	return names
}

// checkXDS refuses xDS settings while the rules come from files, and TLS
// files without TLS; it notes that a rule path set is not read with xDS.
func (c *Config) checkXDS(fs *flag.FlagSet) error {
	r := &c.Rules
	if !r.XDS {
		if set := changed(fs, "xds-"); len(set) > 0 {
			// The flags first: Explain then names their variables
			// (FLOODGATE_XDS_SERVER) before CONFIG_TYPE's.
			return c.refuse(listOf(len(set))+" set, but the rules come from files: xDS settings need %s grpc_xds_sotw (CONFIG_TYPE=GRPC_XDS_SOTW)",
				append(set, "config-type")...)
		}
		return nil
	}
	if !r.XDSTLS.On && (r.XDSTLS.Files != tlsclient.Files{} || r.XDSTLS.SAN != "") {
		// The reference reads them only with TLS on; a user who set them
		// meant TLS, and would silently get none.
		return c.refuse("%s, %s, %s and %s (CONFIG_GRPC_XDS_*_TLS_*) need %s (CONFIG_GRPC_XDS_SERVER_USE_TLS=true)",
			"xds-tls-ca", "xds-tls-cert", "xds-tls-key", "xds-tls-san", "xds-tls")
	}
	if from := r.PathFrom; from != "" && from != DefaultConfigVar && from != ReferenceDefaultFrom {
		c.Notes = append(c.Notes, "the rules come from the xDS server (-config-type grpc_xds_sotw): "+from+" is not read; floodgate check and explain still read it")
	}
	return nil
}

// checkGRPCTLS refuses a client CA or SAN without TLS, security lost in
// silence, and notes a certificate without TLS.
func (c *Config) checkGRPCTLS() error {
	t := &c.GRPCTLS
	switch {
	case t.On && (t.Files.CertFile == "" || t.Files.KeyFile == ""):
		return c.refuse("%s needs %s and %s (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)", "grpc-tls", "grpc-tls-cert", "grpc-tls-key")
	case !t.On && t.Files.ClientCAFile != "":
		return c.refuse("%s (GRPC_CLIENT_TLS_CACERT) needs %s (GRPC_SERVER_USE_TLS=true)", "grpc-client-ca", "grpc-tls")
	case !t.On && (t.Files.CertFile != "" || t.Files.KeyFile != ""):
		c.Notes = append(c.Notes, "a gRPC TLS certificate or key is set but -grpc-tls (GRPC_SERVER_USE_TLS) is off: gRPC is served without TLS")
	case t.Files.ClientSAN != "" && t.Files.ClientCAFile == "":
		return c.refuse("%s (GRPC_CLIENT_TLS_SAN) needs %s (GRPC_CLIENT_TLS_CACERT): without mutual TLS no client certificate is checked", "grpc-client-san", "grpc-client-ca")
	}
	return nil
}

// checkPrometheus refuses the Prometheus listener's settings without it,
// and beside DogStatsD, whose stats it cannot map.
func (c *Config) checkPrometheus(fs *flag.FlagSet) error {
	if c.Server.PrometheusAddr == "" {
		if set := slices.DeleteFunc(changed(fs, "prometheus-"), func(f string) bool { return f == "prometheus-addr" }); len(set) > 0 {
			return c.refuse(listOf(len(set))+" set, but %s (USE_PROMETHEUS=true) is not", append(set, "prometheus-addr")...)
		}
		return nil
	}
	if c.Statsd.Options.DogStatsD {
		return c.refuse("%s and %s: the Prometheus metrics map plain statsd names, not DogStatsD's; keep one", "dogstatsd", "prometheus-addr")
	}
	return nil
}

// checkCapture refuses the capture's settings without a capture file.
func (c *Config) checkCapture(fs *flag.FlagSet) error {
	if c.Capture.Path == "" && len(changed(fs, "capture-")) > 0 {
		return c.refuse("%s and %s need %s", "capture-sample", "capture-max-bytes", "capture")
	}
	return nil
}

// checkCommand refuses arguments but -explain's, which needs a descriptor,
// and -check's one path (checkArgument took it).
func (c *Config) checkCommand() error {
	cmd := &c.Command
	if cmd.Explain && len(cmd.Args) < 2 {
		return c.refuse("%s needs a domain and at least one key=value entry, e.g. floodgate -explain rl api_key=alice", "explain")
	}
	if cmd.Check && len(cmd.Args) > 0 {
		return fmt.Errorf("unexpected arguments %q: check reads one rule file or directory, named after the flags (floodgate check [flags] FILE_OR_DIR) or with -config", cmd.Args)
	}
	if !cmd.Explain && len(cmd.Args) > 0 {
		return fmt.Errorf("unexpected arguments %q (only -explain takes arguments)", cmd.Args)
	}
	return nil
}
