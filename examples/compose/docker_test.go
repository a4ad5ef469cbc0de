package compose

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The image the caddy service builds (examples/docker/Dockerfile): a
// pinned Go builder no older than go.mod asks for, running the build
// script CI runs too, and the official Caddy runtime image at the version
// xcaddy.sh builds.
func TestDockerfile(t *testing.T) {
	stages := dockerfileStages(t, filepath.Join(repo, "examples", "docker", "Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("%d stages, want a builder and the runtime image", len(stages))
	}
	builder, runtime := stages[0], stages[1]

	m := regexp.MustCompile(`^golang:(\d+)\.(\d+)\.(\d+)-[a-z0-9.]+ AS builder$`).FindStringSubmatch(builder.from)
	if m == nil {
		t.Fatalf("builder FROM %q: want golang:X.Y.Z-VARIANT AS builder, an exact Go release", builder.from)
	}
	goMod := readFile(t, filepath.Join(repo, "go.mod"))
	want := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)(?:\.(\d+))?$`).FindStringSubmatch(goMod)
	if want == nil {
		t.Fatal("no go line in go.mod")
	}
	if versionLess(m[1:4], want[1:4]) {
		t.Errorf("builder Go %s.%s.%s is older than go.mod's go %s", m[1], m[2], m[3], strings.TrimPrefix(want[0], "go "))
	}

	var out string
	for _, run := range builder.runs {
		if f := strings.Fields(run); len(f) > 0 {
			i := indexOf(f, "examples/docker/build.sh")
			if i >= 0 && i+1 < len(f) {
				out = f[i+1]
			}
		}
	}
	if out == "" {
		t.Fatalf("the builder does not RUN examples/docker/build.sh OUT (runs %q)", builder.runs)
	}
	if fi, err := os.Stat(filepath.Join(repo, "examples", "docker", "build.sh")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("examples/docker/build.sh is not an executable file (%v)", err)
	}

	caddyVersion := regexp.MustCompile(`CADDY_VERSION=\$\{CADDY_VERSION:-v([0-9.]+)\}`).FindStringSubmatch(readFile(t, filepath.Join(repo, "xcaddy.sh")))
	if caddyVersion == nil {
		t.Fatal("no default CADDY_VERSION in xcaddy.sh")
	}
	if want := "caddy:" + caddyVersion[1] + "-alpine"; runtime.from != want {
		t.Errorf("runtime FROM %q, want %q (the official image at the version xcaddy.sh builds)", runtime.from, want)
	}
	if want := "--from=builder " + out + " /usr/bin/caddy"; !contains(runtime.copies, want) {
		t.Errorf("the runtime image does not COPY %s (copies %q)", want, runtime.copies)
	}
}

type stage struct {
	from         string
	runs, copies []string
}

// dockerfileStages reads a Dockerfile's instructions (continuation lines
// joined, comments dropped) by stage.
func dockerfileStages(t *testing.T, path string) []stage {
	t.Helper()
	var (
		stages []stage
		line   string
	)
	for _, l := range strings.Split(readFile(t, path), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line = strings.Join(strings.Fields(line+l), " ")
		instr, args, _ := strings.Cut(line, " ")
		line = ""
		switch strings.ToUpper(instr) {
		case "FROM":
			stages = append(stages, stage{from: args})
		case "RUN", "COPY":
			if len(stages) == 0 {
				t.Fatalf("%s before FROM", instr)
			}
			s := &stages[len(stages)-1]
			if strings.ToUpper(instr) == "RUN" {
				s.runs = append(s.runs, args)
			} else {
				s.copies = append(s.copies, args)
			}
		}
	}
	return stages
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// versionLess compares dotted versions given as their parts ("" is 0).
func versionLess(a, b []string) bool {
	for i := range a {
		x, _ := strconv.Atoi(a[i])
		y, _ := strconv.Atoi(b[i])
		if x != y {
			return x < y
		}
	}
	return false
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func contains(s []string, v string) bool { return indexOf(s, v) >= 0 }
