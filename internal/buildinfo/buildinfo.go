// Package buildinfo describes the build of floodgate's programs, so that
// floodgate and the floodgate-replay it runs can tell whether they are one
// build. A build without the repository's history (the image's) stamps
// both alike: -ldflags "-X github.com/floodgate/floodgate/internal/buildinfo.stampedVersion=v1.2.3
// -X github.com/floodgate/floodgate/internal/buildinfo.stampedCommit=abc123".
package buildinfo

import (
	"cmp"
	"fmt"
	"runtime/debug"
)

// ParentEnv is where floodgate tells the floodgate-replay it runs its build.
const ParentEnv = "FLOODGATE_PARENT_BUILD"

// stampedVersion and stampedCommit, when set, win over what the toolchain
// recorded.
var stampedVersion, stampedCommit string

// String describes the build as "VERSION commit COMMIT GOVERSION": the
// module's version (a pseudo-version from a stamped checkout, else
// "(devel)"), the commit ("unknown" when neither recorded nor stamped,
// "+dirty" when the tree had changes) and the Go toolchain.
func String() string {
	v, commit, suffix, goVersion := "(devel)", "unknown", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		v, goVersion = cmp.Or(bi.Main.Version, v), bi.GoVersion
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				suffix = "+dirty"
			}
		}
	}
	if stampedCommit != "" {
		commit, suffix = stampedCommit, ""
	}
	return fmt.Sprintf("%s commit %s%s %s", cmp.Or(stampedVersion, v), commit, suffix, goVersion)
}
