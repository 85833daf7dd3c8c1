package process

import "time"

// EncodeJob and DecodeJob are the job's message to its supervisor, both ways.
var (
	EncodeJob = encodeJob
	DecodeJob = decodeJob
)

// NewHandlerQuiet is NewHandler with another quiet period before a refill.
func NewHandlerQuiet(opts Options, quiet time.Duration) *Handler { return newHandler(opts, quiet) }

// PoolSize is how many idle supervisors the handler keeps (0: no pool).
func (h *Handler) PoolSize() int {
	if h.pool == nil {
		return 0
	}
	return h.pool.size
}

// IdlePids are the pids of the pool's idle supervisors, a dead one not yet dropped included.
func (h *Handler) IdlePids() []int {
	if h.pool == nil {
		return nil
	}
	h.pool.mu.Lock()
	defer h.pool.mu.Unlock()
	pids := make([]int, 0, len(h.pool.idle))
	for _, s := range h.pool.idle {
		pids = append(pids, s.cmd.Process.Pid)
	}
	return pids
}

// Served is how many jobs an idle supervisor of the pool ran, and how many one started for them.
func (h *Handler) Served() (pooled, onDemand int64) {
	if h.pool == nil {
		return 0, 0
	}
	return h.pool.pooled.Load(), h.pool.onDemand.Load()
}

// EndBeforeTheAck makes the handler wait, after it sent an idle supervisor its job, until that
// supervisor has ended and its status pipe is read to its end, before it looks at the
// acknowledgement: a short job is then over, "spec" and the pipe's end both seen.
func (h *Handler) EndBeforeTheAck() {
	h.beforeAck = func(p *supProc, st *statusReader) {
		<-p.exited
		<-st.done
	}
}

// SetAckWait sets how long an idle supervisor may take to acknowledge its job's message.
func (h *Handler) SetAckWait(d time.Duration) { h.ackWait = d }
