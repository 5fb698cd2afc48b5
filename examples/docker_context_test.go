package examples_test

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// .dockerignore is matched by moby/patternmatcher, which builds the
// context `docker build` sends.

// brokenDockerignores are edits of .dockerignore whose build context the
// build check must refuse, with what the error says; the exception (!)
// is one a matcher without Docker's exceptions would read wrong.
var brokenDockerignores = []struct {
	name, old, new, want string
}{
	{"excluding a package the server is built from", "docs\n", "docs\npkg/rules\n", "excludes pkg/rules/"},
	{"excluding what COPY names", "examples\n", "examples\nconfig\n", "excludes config, which COPY names"},
	{"letting a binary in", "/server\n", "", "lets server into the build context"},
	{"an exception letting the repository in", ".git\n", ".git\n!.git/config\n", "lets .git/config into the build context"},
	{"excluding embedded files", "docs\n", "docs\n**/assets\n", "excludes internal/ui/assets/"},
}

// checkBuildContext checks .dockerignore's patterns, as patternmatcher
// matches them when the build context is sent: every file a COPY names
// and every Go and embedded file the server is built from is in the
// context, and the repository and local binaries are not.
func checkBuildContext(df *dockerfile, dockerignore []byte) error {
	patterns, err := ignorefile.ReadAll(bytes.NewReader(dockerignore))
	if err != nil {
		return err
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return err
	}
	// excluded walks from the context's root down to p, as the context is
	// walked, passing each directory's result to its children.
	excluded := func(p string) (bool, error) {
		var info patternmatcher.MatchInfo
		var match bool
		parts := strings.Split(p, "/")
		for i := range parts {
			match, info, err = pm.MatchesUsingParentResults(strings.Join(parts[:i+1], "/"), info)
			if err != nil {
				return false, err
			}
		}
		return match, nil
	}
	var errs []error
	for _, st := range df.stages {
		for _, c := range commands[*instructions.CopyCommand](st) {
			if c.From != "" {
				continue
			}
			for _, src := range c.SourcePaths {
				if src == "." {
					continue
				}
				if ex, err := excluded(filepath.ToSlash(filepath.Clean(src))); err != nil {
					errs = append(errs, err)
				} else if ex {
					errs = append(errs, fmt.Errorf(".dockerignore excludes %s, which COPY names (Dockerfile:%d)", src, line(c)))
				}
			}
		}
	}
	// Every Go and embedded file the image's programs are built from.
	list := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`, "./cmd/server", "./cmd/replay")
	list.Dir = repoRoot
	out, err := list.Output()
	if err != nil {
		return fmt.Errorf("go list: %v", err)
	}
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		return err
	}
	needed := []string{"go.mod", "go.sum"}
	for _, f := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(abs, f); err == nil && !strings.HasPrefix(rel, "..") {
			needed = append(needed, filepath.ToSlash(rel))
		}
	}
	reported := map[string]bool{}
	for _, f := range needed {
		ex, err := excluded(f)
		if err != nil {
			return err
		}
		if dir := filepath.ToSlash(filepath.Dir(f)) + "/"; ex && !reported[dir] {
			reported[dir] = true
			errs = append(errs, fmt.Errorf(".dockerignore excludes %s, which the server is built from (%s)", dir, f))
		}
	}
	// And what must stay out: the repository and local binaries.
	for _, p := range []string{".git/config", "server", "bin/floodgate"} {
		if ex, err := excluded(p); err != nil {
			errs = append(errs, err)
		} else if !ex {
			errs = append(errs, fmt.Errorf(".dockerignore lets %s into the build context", p))
		}
	}
	return errors.Join(errs...)
}
