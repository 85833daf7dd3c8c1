package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/qlcontrol/controlcore/coordinator"
)

// replicaProcess is one `qlsched run` child.
type replicaProcess struct {
	cmd     *exec.Cmd
	addr    chan string      // the HTTP address it logged once running
	http    string           // that address, once seen
	stopped chan stoppedLine // its final counters, logged on SIGTERM
	exited  chan error       // Wait's result
	ticks0  int64            // CPU ticks when the measurement began
	claims  *dto.Histogram   // scraped just before it stopped
	mem     memory           // just before it stopped
	logTail *strings.Builder // the last lines of its log, for errors
	owner   string
}

// stoppedLine is the "stopped" line `qlsched run` logs with its counters.
type stoppedLine struct {
	Msg      string `json:"msg"`
	Claims   int64  `json:"claims"`
	Admits   int64  `json:"admits"`
	Skips    int64  `json:"skips"`
	Releases int64  `json:"releases"`
	Races    int64  `json:"races"`
	Retries  int64  `json:"retries"`
	Errors   int64  `json:"errors"`
}

// runProcesses runs cfg.Replicas real `qlsched run` processes connected as the runtime role
// (runtimeURL), each with its own pool and owner, until done(triggers admitted so far) or the
// duration passes; done nil: the duration. As for in-process replicas, the database is asked
// (admitted) only once the processes' own admit counters (their /metrics) could make done true:
// admitted is an aggregate over every Run of the phase, and asked every 50 ms it took a core of
// the server from the replicas (docs/performance.md, "Real processes against in-process replicas"). Counters come from each process's final log line, claim latency from its
// /metrics histogram (bucket bounds, so coarse), CPU and RSS from /proc.
func runProcesses(ctx context.Context, cfg Config, runtimeURL string, admitted func() (int64, error), done func(int64) bool) (replicaResult, []*replicaProcess, error) {
	res := replicaResult{claims: &samples{}, admits: &samples{}}
	lease := max(coordinator.DefaultLease, 2*cfg.Cadence)
	var procs []*replicaProcess
	defer func() {
		for _, p := range procs { // on an error path: never leave a child behind
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
	}()
	for i := range cfg.Replicas {
		p := &replicaProcess{owner: fmt.Sprintf("bench-process-%d", i), addr: make(chan string, 1),
			stopped: make(chan stoppedLine, 1), exited: make(chan error, 1), logTail: &strings.Builder{}}
		p.cmd = exec.Command(cfg.Exe, "run", "--owner", p.owner, "--budget", strconv.Itoa(cfg.Budget),
			"--cadence", cfg.Cadence.String(), "--lease", lease.String(), "--admit-batch", strconv.Itoa(max(cfg.Batch, 1)),
			"--http-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "info")
		if cfg.CPUProfileDir != "" {
			p.cmd.Args = append(p.cmd.Args, "--cpu-profile", filepath.Join(cfg.CPUProfileDir, p.owner+".pprof"))
		}
		p.cmd.Env = append(os.Environ(), "QL_DATABASE_URL="+runtimeURL)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // the bench dies, its replicas too
		stderr, err := p.cmd.StderrPipe()
		if err != nil {
			return res, procs, err
		}
		if err := p.cmd.Start(); err != nil {
			return res, procs, fmt.Errorf("start replica process: %w", err)
		}
		procs = append(procs, p)
		go p.readLog(stderr)
	}
	start := time.Now()
	for _, p := range procs {
		select {
		case p.http = <-p.addr:
		case err := <-p.exited:
			return res, procs, fmt.Errorf("replica process %s exited before it ran (%v): %s", p.owner, err, p.logTail)
		case <-ctx.Done():
			return res, procs, ctx.Err()
		case <-time.After(time.Minute):
			return res, procs, fmt.Errorf("replica process %s did not start within a minute: %s", p.owner, p.logTail)
		}
		p.ticks0 = cpuTicks(p.cmd.Process.Pid)
	}

	deadline := time.NewTimer(cfg.Duration)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var cpu float64
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline.C:
			break loop
		case <-tick.C:
			if done == nil || !done(scrapedAdmits(procs)) {
				continue
			}
			n, err := admitted()
			if err != nil {
				return res, procs, err
			}
			if done(n) {
				break loop
			}
		}
	}
	res.seconds = time.Since(start).Seconds()
	var firstErr error
	for _, p := range procs {
		p.claims, _ = scrapeHistogram("http://"+p.http+"/metrics", "qlsched_claim_duration_seconds")
		p.mem = rssOf(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		cpu += float64(cpuTicks(p.cmd.Process.Pid)-p.ticks0) / clockTicks
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if err := <-p.exited; err != nil && firstErr == nil {
			firstErr = fmt.Errorf("replica process %s: %v: %s", p.owner, err, p.logTail)
		}
		select {
		case st := <-p.stopped:
			res.stats.Claims += st.Claims
			res.stats.Admits += st.Admits
			res.stats.Skips += st.Skips
			res.stats.Releases += st.Releases
			res.stats.Races += st.Races
			res.stats.Retries += st.Retries
			res.stats.Errors += st.Errors
		default:
			if firstErr == nil {
				firstErr = fmt.Errorf("replica process %s logged no final counters: %s", p.owner, p.logTail)
			}
		}
	}
	res.cpuSeconds = cpu
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return res, procs, firstErr
}

// readLog follows a child's JSON log: the running line gives its HTTP address, the stopped line
// its counters; the last few lines are kept for error messages. Exits when the pipe closes, then
// reports Wait's result.
func (p *replicaProcess) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var tail []string
	for sc.Scan() {
		line := sc.Text()
		tail = append(tail, line)
		if len(tail) > 5 {
			tail = tail[1:]
		}
		var l struct {
			Msg      string `json:"msg"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch l.Msg {
		case "replica running":
			p.addr <- l.HTTPAddr
		case "stopped":
			var st stoppedLine
			if json.Unmarshal([]byte(line), &st) == nil {
				p.stopped <- st
			}
		}
	}
	p.logTail.WriteString(strings.Join(tail, "\n"))
	p.exited <- p.cmd.Wait()
}

// scrapedAdmits is the sum of the processes' qlsched_admits_total (0 for one not answering).
func scrapedAdmits(procs []*replicaProcess) int64 {
	var n int64
	for _, p := range procs {
		n += int64(scrapeCounter("http://"+p.http+"/metrics", "qlsched_admits_total"))
	}
	return n
}

// scrapeCounter is a counter's value at url, 0 if it cannot be read.
func scrapeCounter(url, name string) float64 {
	families, err := scrapeMetrics(url)
	if err != nil {
		return 0
	}
	f, ok := families[name]
	if !ok || len(f.Metric) == 0 || f.Metric[0].Counter == nil {
		return 0
	}
	return f.Metric[0].Counter.GetValue()
}

func scrapeHistogram(url, name string) (*dto.Histogram, error) {
	families, err := scrapeMetrics(url)
	if err != nil {
		return nil, err
	}
	f, ok := families[name]
	if !ok || len(f.Metric) == 0 || f.Metric[0].Histogram == nil {
		return nil, errors.New(name + " not exposed")
	}
	return f.Metric[0].Histogram, nil
}

// histogramQuantile is the upper bound of the bucket holding quantile q over hs merged, in ms
// (a bound, not an interpolation: the buckets double, so the figure is coarse).
func histogramQuantile(hs []*dto.Histogram, q float64) float64 {
	counts := map[float64]uint64{}
	var total uint64
	for _, h := range hs {
		if h == nil {
			continue
		}
		total += h.GetSampleCount()
		for _, b := range h.Bucket {
			counts[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	if total == 0 {
		return 0
	}
	bounds := make([]float64, 0, len(counts))
	for b := range counts {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	for _, b := range bounds {
		if float64(counts[b]) >= q*float64(total) {
			return b * 1000
		}
	}
	return math.Inf(1)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

// cpuTicks is a process's user + system time in clock ticks.
func cpuTicks(pid int) int64 {
	body, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// the command name may hold spaces; fields count from after its closing parenthesis
	s := string(body)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}
