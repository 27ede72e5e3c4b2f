package e2e

// What README.md and the guides in docs/guides show to type, read from
// their Markdown each run and typed into one bash against the real binary,
// so that a guide and its test cannot drift apart: change a command in the
// guide and its test runs the changed one.
//
// The code blocks a test runs sit between two HTML comments of the
// Markdown, <!-- NAME:start --> and <!-- NAME:end -->. In an ```sh block
// each line is a command (a trailing backslash continues it on the next);
// blank lines and comments are left out, except what says how the command
// ends:
//   - "# refused" in a command's comment: the server refuses it, so the
//     command must exit with status 1 (else it must exit 0);
//   - "# → TEXT", at the end of a command or on the comment line right
//     after it: what the command prints on stdout. Whitespace is ignored
//     (so JSON may be spaced either way), "…" stands for any text, and
//     <NAME> (capitals) for a text without quotes that later commands use:
//     <NAME> in a command is replaced by what it stood for.
//
// The shell is the reader's: one bash for all the commands of a test, so a
// variable or an export of one command holds for the next. The default
// address, 127.0.0.1:7070, becomes the test server's address wherever it
// appears, and TENURE_ADDR is preset to the test server. A command that
// starts a server ("./tenure server …") runs apart, in the background, on
// a free loopback port (TENURE_LISTEN, or in place of its --listen), until
// the next such command or the test's end; the commands after it reach it
// at its address.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/logbuf"
)

// defaultAddr is the address the guides show; a test's shell types its own
// server's address in its place.
const defaultAddr = "127.0.0.1:7070"

// guideCommandTimeout bounds one command of a guide. It only stops a hung
// command; nothing asserts how fast one is.
const guideCommandTimeout = 2 * time.Minute

// repoPath returns the path of a file of the repository, from e2e.
func repoPath(elem ...string) string {
	return filepath.Join(append([]string{".."}, elem...)...)
}

// lookTool returns the path of a program a test runs. Without it the test
// skips, naming how to install it, or fails when CI is set: .ci/run
// installs every such program.
func lookTool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed and CI is set (.ci/run installs it: %s): %v", name, install, err)
	}
	t.Skipf("skipping: %s is not installed; install it (%s), as .ci/run does", name, install)
	return ""
}

// guideTools are the programs the guides' commands run, with how to
// install each.
var guideTools = map[string]string{
	"curl":    "apt-get install curl",
	"grpcurl": "go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4",
	"node":    "apt-get install nodejs npm",
	"openssl": "apt-get install openssl",
}

// lookTools is lookTool for each of names, programs of guideTools.
func lookTools(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		install, ok := guideTools[name]
		if !ok {
			t.Fatalf("guideTools does not say how to install %s", name)
		}
		lookTool(t, name, install)
	}
}

// fencedBlock is one fenced code block of a Markdown file.
type fencedBlock struct {
	lang string // its info string: sh, js, …
	body string // its lines, as written
}

// readFenced returns the fenced code blocks between the markers
// <!-- name:start --> and <!-- name:end --> of the Markdown file at path.
func readFenced(path, name string) ([]fencedBlock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	start, end := "<!-- "+name+":start -->", "<!-- "+name+":end -->"
	_, rest, ok := strings.Cut(string(b), start)
	if !ok {
		return nil, fmt.Errorf("%s has no %q marker: the blocks a test runs sit between %q and %q", path, start, start, end)
	}
	text, after, ok := strings.Cut(rest, end)
	if !ok {
		return nil, fmt.Errorf("%s has %q but no %q after it", path, start, end)
	}
	if strings.Contains(after, start) || strings.Contains(text, start) {
		return nil, fmt.Errorf("%s has %q twice: each name marks one place", path, start)
	}
	var blocks []fencedBlock
	var cur *fencedBlock
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &fencedBlock{lang: strings.TrimPrefix(trimmed, "```")}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: the last code block between the %s markers is not closed", path, name)
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no code block between the %s markers", path, name)
	}
	return blocks, nil
}

// guideCommand is one command of a guide, as typed.
type guideCommand struct {
	line string
	// refused: its comment says the server refuses it ("# refused…").
	refused bool
	// prints is what its "# → " comment says it prints ("" if none).
	prints string
}

// printsMark starts a comment that says what a command prints.
const printsMark = "# →"

// readCommands returns the commands of the ```sh blocks between the
// markers <!-- name:start --> and <!-- name:end --> of the Markdown file at
// path; another kind of block there is an error.
func readCommands(path, name string) ([]guideCommand, error) {
	blocks, err := readFenced(path, name)
	if err != nil {
		return nil, err
	}
	var cmds []guideCommand
	for _, b := range blocks {
		if b.lang != "sh" {
			return nil, fmt.Errorf("%s: a code block between the %s markers is ```%s, not ```sh", path, name, b.lang)
		}
		c, err := parseCommands(b.body)
		if err != nil {
			return nil, fmt.Errorf("%s, between the %s markers: %w", path, name, err)
		}
		cmds = append(cmds, c...)
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("%s: no commands between the %s markers", path, name)
	}
	return cmds, nil
}

// parseCommands reads the commands of one ```sh block.
func parseCommands(body string) ([]guideCommand, error) {
	var cmds []guideCommand
	pending := ""
	afterCommand := false // the line before was a command
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		trimmed := strings.TrimSpace(line)
		if pending == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			if p, ok := strings.CutPrefix(trimmed, printsMark); ok {
				if !afterCommand || cmds[len(cmds)-1].prints != "" {
					return nil, fmt.Errorf("%q does not follow a command that says nothing of what it prints", trimmed)
				}
				cmds[len(cmds)-1].prints = strings.TrimSpace(p)
			}
			afterCommand = false
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		full := pending + line
		pending = ""
		c := guideCommand{line: full, refused: strings.Contains(full, "# refused")}
		if _, p, ok := strings.Cut(full, printsMark); ok {
			c.prints = strings.TrimSpace(p)
		}
		cmds = append(cmds, c)
		afterCommand = true
	}
	if pending != "" {
		return nil, fmt.Errorf("the last command ends in a backslash")
	}
	return cmds, nil
}

var (
	// placeholder is <NAME> in a "# → " comment or a command.
	placeholder = regexp.MustCompile(`<([A-Z][A-Z0-9_]*)>`)
	whitespace  = regexp.MustCompile(`\s+`)
)

// matchPrinted reports whether out is what pattern (a "# → " comment) says
// a command prints, and what each <NAME> of pattern stood for; a <NAME> of
// known must stand for its value there.
func matchPrinted(pattern, out string, known map[string]string) (map[string]string, bool) {
	var re strings.Builder
	re.WriteString(`(?s)\A`)
	var names []string
	for i, lit := range strings.Split(whitespace.ReplaceAllString(pattern, ""), "…") {
		if i > 0 {
			re.WriteString(`.*`)
		}
		last := 0
		for _, m := range placeholder.FindAllStringSubmatchIndex(lit, -1) {
			re.WriteString(regexp.QuoteMeta(lit[last:m[0]]))
			name := lit[m[2]:m[3]]
			if v, ok := known[name]; ok {
				re.WriteString(regexp.QuoteMeta(whitespace.ReplaceAllString(v, "")))
			} else {
				re.WriteString(`([^"]+)`)
				names = append(names, name)
			}
			last = m[1]
		}
		re.WriteString(regexp.QuoteMeta(lit[last:]))
	}
	re.WriteString(`\z`)
	m := regexp.MustCompile(re.String()).FindStringSubmatch(whitespace.ReplaceAllString(out, ""))
	if m == nil {
		return nil, false
	}
	vars := map[string]string{}
	for i, n := range names {
		if v, ok := vars[n]; ok && v != m[i+1] {
			return nil, false
		}
		vars[n] = m[i+1]
	}
	return vars, true
}

// guideShell is one bash into which a test types a guide's commands, in a
// directory of its own holding ./tenure (the binary under test), which is
// also first on its PATH.
type guideShell struct {
	t    *testing.T
	dir  string            // where the commands run
	logs string            // where their output goes
	addr string            // the test server's host:port, typed for 127.0.0.1:7070
	vars map[string]string // what each <NAME> of an output stood for
	// env is the environment of the shell and of a server a command
	// starts: the test's, without TENURE_ variables.
	env    []string
	bash   *exec.Cmd
	stdin  io.WriteCloser
	status chan string // one line per command: its exit status
	stderr *logbuf.Buffer
	n      int
	// server is the one a command started, if any; servers, the URL each
	// such command served on, in order.
	server  *serverProc
	servers []string
	// transcript is every command with its output.
	transcript strings.Builder
}

// newGuideShell starts bash in a new directory holding ./tenure (also on
// its PATH), to reach
// the server at addr (host:port; "" when a command of the guide starts
// it).
func newGuideShell(t *testing.T, addr string) *guideShell {
	t.Helper()
	s := &guideShell{t: t, dir: t.TempDir(), logs: t.TempDir(), vars: map[string]string{}, stderr: new(logbuf.Buffer), status: make(chan string, 1)}
	s.link("tenure", tenureBin)
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "TENURE_"):
			// Left out: the test sets what it needs.
		case strings.HasPrefix(kv, "PATH="):
			// tenure, as a guide that does not say ./tenure types it.
			s.env = append(s.env, "PATH="+s.dir+string(os.PathListSeparator)+strings.TrimPrefix(kv, "PATH="))
		default:
			s.env = append(s.env, kv)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.bash = exec.Command("bash", "-s")
	s.bash.Dir = s.dir
	s.bash.Env = s.env
	s.bash.ExtraFiles = []*os.File{w} // fd 3: the exit statuses
	s.bash.Stdout, s.bash.Stderr = s.stderr, s.stderr
	s.bash.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.stdin, err = s.bash.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.bash.Start(); err != nil {
		t.Fatalf("starting bash: %v", err)
	}
	w.Close()
	go func() {
		defer close(s.status)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s.status <- sc.Text()
		}
		r.Close()
	}()
	t.Cleanup(func() {
		s.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- s.bash.Wait() }()
		select {
		case <-done:
		case <-time.After(e2eExitTimeout):
			// Its own process group: bash and what it runs.
			syscall.Kill(-s.bash.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("the commands typed, with their output:\n%s", s.transcript.String())
		}
	})
	s.typeLine("set -o pipefail")
	if addr != "" {
		s.setAddr("http://" + addr)
	}
	return s
}

// link makes name, in the shell's directory, a symbolic link to target.
func (s *guideShell) link(name, target string) {
	s.t.Helper()
	abs, err := filepath.Abs(target)
	if err != nil {
		s.t.Fatal(err)
	}
	p := filepath.Join(s.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Symlink(abs, p); err != nil {
		s.t.Fatal(err)
	}
}

// typeLine types text into the shell, which runs it before the next command.
func (s *guideShell) typeLine(text string) {
	s.t.Helper()
	if _, err := io.WriteString(s.stdin, text+"\n"); err != nil {
		s.t.Fatalf("typing into bash: %v (bash said: %s)", err, s.stderr.String())
	}
}

// setAddr makes url the server's: the address typed for 127.0.0.1:7070
// and TENURE_ADDR.
func (s *guideShell) setAddr(serverURL string) {
	s.t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = u.Host
	s.typeLine("export TENURE_ADDR=" + singleQuoted(serverURL))
}

// rewrite is line as the test types it: the test server's address for the
// default one, and each <NAME> before a "# → " comment replaced by what it
// stood for.
func (s *guideShell) rewrite(line string) string {
	s.t.Helper()
	cmd, comment, hasComment := strings.Cut(line, printsMark)
	if s.addr != "" {
		cmd = strings.ReplaceAll(cmd, defaultAddr, s.addr)
	}
	var unknown []string
	cmd = placeholder.ReplaceAllStringFunc(cmd, func(m string) string {
		v, ok := s.vars[m[1:len(m)-1]]
		if !ok {
			unknown = append(unknown, m)
			return m
		}
		return v
	})
	if len(unknown) > 0 {
		s.t.Fatalf("the command %q uses %s, which no output before it named (a \"# → \" comment holding <NAME> names one)", line, strings.Join(unknown, ", "))
	}
	if hasComment {
		cmd += printsMark + comment
	}
	return cmd
}

// run types each command in order, and checks that it ends as its comments
// say: exit status 0 (1 if refused), and what it prints.
func (s *guideShell) run(cmds []guideCommand) {
	s.t.Helper()
	for _, c := range cmds {
		s.runOne(c)
	}
}

// runOne types c and checks how it ends; it returns its stdout.
func (s *guideShell) runOne(c guideCommand) string {
	s.t.Helper()
	line := s.rewrite(c.line)
	if strings.HasPrefix(strings.TrimSpace(line), "./tenure server") {
		s.startServer(line)
		return ""
	}
	s.n++
	outFile := filepath.Join(s.logs, fmt.Sprintf("%d.out", s.n))
	errFile := filepath.Join(s.logs, fmt.Sprintf("%d.err", s.n))
	// The newline before } ends a comment of the line.
	s.typeLine(fmt.Sprintf("{ %s\n} >%s 2>%s </dev/null 3>&-; echo $? >&3", line, singleQuoted(outFile), singleQuoted(errFile)))
	var status string
	select {
	case st, ok := <-s.status:
		if !ok {
			s.t.Fatalf("bash ended at the command %q: %s", line, s.stderr.String())
		}
		status = st
	case <-time.After(guideCommandTimeout):
		s.t.Fatalf("the command %q did not end within %v", line, guideCommandTimeout)
	}
	stdout, _ := os.ReadFile(outFile)
	stderr, _ := os.ReadFile(errFile)
	fmt.Fprintf(&s.transcript, "$ %s\n%s%s[exit %s]\n", line, stdout, stderr, status)
	want := "0"
	if c.refused {
		want = "1"
	}
	if status != want {
		s.t.Fatalf("the command %q exited %s, want %s; stdout:\n%s\nstderr:\n%s", line, status, want, orNothing(stdout), orNothing(stderr))
	}
	if c.prints != "" {
		pattern := c.prints
		if s.addr != "" {
			pattern = strings.ReplaceAll(pattern, defaultAddr, s.addr)
		}
		vars, ok := matchPrinted(pattern, string(stdout), s.vars)
		if !ok {
			s.t.Fatalf("the command %q printed what its comment does not say (%s %s):\n%s\nstderr:\n%s", line, printsMark, c.prints, orNothing(stdout), orNothing(stderr))
		}
		for k, v := range vars {
			s.vars[k] = v
		}
	}
	return string(stdout)
}

// singleQuoted is s quoted for bash, as one word.
func singleQuoted(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// orNothing is out, or says that it is empty.
func orNothing(out []byte) string {
	if len(out) == 0 {
		return "(nothing)"
	}
	return string(out)
}

// listenFlag is the --listen flag of a server command, with its value.
var listenFlag = regexp.MustCompile(`(--listen[= ])\S+`)

// servingLine is what `tenure server` prints once it listens.
var servingLine = regexp.MustCompile(`tenure serving on (\S+)`)

// startServer runs line, a `tenure server` command, in the background on
// a free port, after stopping the server an earlier command started; once
// it is ready, the commands after it reach it.
func (s *guideShell) startServer(line string) {
	s.t.Helper()
	if p := s.server; p != nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
		waitProcExit(s.t, p)
	}
	line = listenFlag.ReplaceAllString(line, "${1}127.0.0.1:0")
	p := &serverProc{out: new(logbuf.Buffer), done: make(chan struct{})}
	p.cmd = exec.Command("bash", "-c", "exec "+line)
	p.cmd.Dir = s.dir
	p.cmd.Env = append(s.env[:len(s.env):len(s.env)], "TENURE_LISTEN=127.0.0.1:0")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		s.t.Fatalf("starting %q: %v", line, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	s.t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
		}
		<-p.done
		if s.t.Failed() {
			s.t.Logf("output of %q:\n%s", line, p.out.String())
		}
	})
	s.server = p
	var serverURL string
	eventually.NoError(s.t, fmt.Sprintf("the command %q to serve", line), func() error {
		if m := servingLine.FindStringSubmatch(p.out.String()); m != nil {
			serverURL = m[1]
			return nil
		}
		if p.exited() {
			return eventually.Stop(fmt.Errorf("it exited (%v); its output:\n%s", p.waitErr, p.out.String()))
		}
		return fmt.Errorf("it did not say so; its output:\n%s", p.out.String())
	})
	u, err := url.Parse(serverURL)
	if err != nil {
		s.t.Fatal(err)
	}
	p.addr = u.Host
	if _, _, err := net.SplitHostPort(p.addr); err != nil {
		s.t.Fatalf("the command %q printed an address that is not host:port: %q", line, serverURL)
	}
	if u.Scheme == "https" {
		// Only to wait for readiness; the guide's commands check the
		// certificate as the guide says.
		p.clientTLS = &tls.Config{InsecureSkipVerify: true}
	}
	if err := waitReady(p); err != nil {
		s.t.Fatalf("the command %q served on %s but is not ready: %v; its output:\n%s", line, serverURL, err, p.out.String())
	}
	fmt.Fprintf(&s.transcript, "$ %s &\n%s", line, p.out.String())
	s.servers = append(s.servers, serverURL)
	s.setAddr(serverURL)
}

// TestReadCommands: the reader of a guide's commands takes only the blocks
// between its markers, joins continued lines, leaves out comments, marks
// refused commands and what a command prints, and refuses what it cannot
// read.
func TestReadCommands(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "guide.md")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cmds, err := readCommands(write("intro\n```sh\nnot me\n```\n<!-- x:start -->\ntext\n```sh\n# a comment\n\nx=$(echo a)\ncurl -s \\\n  -d y   # after\n"+
		"# → {\"a\": <A>}\n./tenure z # refused: no\n```\nmore text\n  ```sh\n  echo b   # → b\n  ```\n<!-- x:end -->\n```sh\nnor me\n```\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v", cmds)
	want := fmt.Sprintf("%+v", []guideCommand{
		{line: "x=$(echo a)"},
		{line: "curl -s    -d y   # after", prints: `{"a": <A>}`},
		{line: "./tenure z # refused: no", refused: true},
		{line: "  echo b   # → b", prints: "b"},
	})
	if got != want {
		t.Errorf("readCommands = %s, want %s", got, want)
	}
	for _, bad := range []string{
		"no markers",
		"<!-- x:start -->\n```sh\na\n```\n",                                 // no end
		"<!-- x:start -->\n<!-- x:end -->",                                  // no block
		"<!-- x:start -->\n```go\na\n```\n<!-- x:end -->",                   // not sh
		"<!-- x:start -->\n```sh\na\n<!-- x:end -->",                        // not closed
		"<!-- x:start -->\n```sh\na \\\n```\n<!-- x:end -->",                // continued past the end
		"<!-- x:start -->\n```sh\n# → a\nb\n```\n<!-- x:end -->",            // output of nothing
		"<!-- x:start -->\n```sh\nb\n\n# → a\n```\n<!-- x:end -->",          // not right after it
		"<!-- x:start -->\n```sh\nb # → a\n# → c\n```\n<!-- x:end -->",      // said twice
		"<!-- x:start -->\n```sh\nb\n```\n<!-- x:end -->\n<!-- x:start -->", // marked twice
	} {
		if _, err := readCommands(write(bad), "x"); err == nil {
			t.Errorf("readCommands(%q) = nil error, want one", bad)
		}
	}
}

// TestMatchPrinted: what a "# → " comment says is matched whole,
// whitespace aside, with … for any text and <NAME> naming a text.
func TestMatchPrinted(t *testing.T) {
	lease := `{"tasks":[{"taskId":"01ab", "queue":"emails", "leaseId":"01cd", "attempt":1}]}`
	for _, c := range []struct {
		pattern, out string
		known        map[string]string
		want         map[string]string // nil: no match
	}{
		{`{}`, "{}\n", nil, map[string]string{}},
		{`{"status": "SERVING"}`, "{\n  \"status\": \"SERVING\"\n}\n", nil, map[string]string{}},
		{`{"status": "SERVING"}`, `{"status": "NOT_SERVING"}`, nil, nil},
		{`{}`, `{"tasks":[]}`, nil, nil},
		{`{"tasks":[{"taskId":"<TASK_ID>", …, "leaseId":"<LEASE_ID>", …}]}`, lease, nil, map[string]string{"TASK_ID": "01ab", "LEASE_ID": "01cd"}},
		{`{"tasks":[{"taskId":"<TASK_ID>", …}]}`, lease, map[string]string{"TASK_ID": "01ab"}, map[string]string{}},
		{`{"tasks":[{"taskId":"<TASK_ID>", …}]}`, lease, map[string]string{"TASK_ID": "01xy"}, nil},
		{`{"tasks":[{"taskId":"<ID>", "queue":"<ID>", …}]}`, lease, nil, nil},
		{`{"tasks":[{"taskId":"…"}]}`, lease, nil, nil}, // … is not the end
		{`… tenure.v1.TaskService …`, "grpc.health.v1.Health\ntenure.v1.TaskService\ntenure.v1.WorkerService\n", nil, map[string]string{}},
		{`… tenure.v1.TaskService …`, "grpc.health.v1.Health\n", nil, nil},
		{`<TASK_ID>`, "01ab\n", nil, map[string]string{"TASK_ID": "01ab"}},
		{`<TASK_ID>`, "\n", nil, nil},
		{`a.b`, "axb", nil, nil}, // literal, not a regular expression
	} {
		got, ok := matchPrinted(c.pattern, c.out, c.known)
		if ok != (c.want != nil) || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("matchPrinted(%q, %q, %v) = %v, %v; want %v", c.pattern, c.out, c.known, got, ok, c.want)
		}
	}
}
