// Command qltestjob is the job the process gates (internal/testkit/faults, issue 32) give
// qlworker to run: it appends "run_id attempt_no pid start" to an execution log, sleeps, appends
// "run_id attempt_no pid end" and exits with a given code. A start without an end is an
// execution that was killed; the gates count executions per Run from the log. The Run and
// Attempt come from the environment qlworker's process handler sets (QL_RUN_ID, QL_ATTEMPT_NO).
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	var (
		logPath    = flag.String("log", os.Getenv("QLTESTJOB_LOG"), "execution log to append to (default $QLTESTJOB_LOG)")
		sleep      = flag.Duration("sleep", 0, "how long to run")
		firstSleep = flag.Duration("first-sleep", -1, "how long attempt 1 runs (default --sleep)")
		code       = flag.Int("exit", 0, "exit code")
	)
	flag.Parse()
	if *logPath == "" {
		fmt.Fprintln(os.Stderr, "qltestjob: no --log and no QLTESTJOB_LOG")
		os.Exit(2)
	}
	runID, attemptNo := os.Getenv("QL_RUN_ID"), os.Getenv("QL_ATTEMPT_NO")
	d := *sleep
	if n, _ := strconv.Atoi(attemptNo); n == 1 && *firstSleep >= 0 {
		d = *firstSleep
	}
	record(*logPath, runID, attemptNo, "start")
	time.Sleep(d)
	record(*logPath, runID, attemptNo, "end")
	os.Exit(*code)
}

// record appends one line with a single write to an O_APPEND file: lines of concurrent jobs
// never interleave.
func record(path, runID, attemptNo, what string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qltestjob: open the execution log: %v\n", err)
		os.Exit(2)
	}
	_, err = fmt.Fprintf(f, "%s %s %d %s\n", runID, attemptNo, os.Getpid(), what)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qltestjob: write the execution log: %v\n", err)
		os.Exit(2)
	}
}
