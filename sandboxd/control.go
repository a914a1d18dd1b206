package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// The executor's end of a sandbox's control channel (protocol.go): requests
// sent to init and matched to their replies (sendJob, await, replies), the
// reader that delivers replies and job exits (readLoop, deliver), and how the
// channel ends (fail, initExited).

// request is a message waiting for init's reply.
type request struct {
	typ   string
	reply chan *message
	job   *job // exec and files requests
}

// job is a process init started for the executor: an exec or a files stage.
type job struct {
	id      string
	started bool
	exit    chan *exitEvent // init's exit event, once
}

// fail marks the control channel unusable, once, with why.
func (s *Sandbox) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deadErr == nil {
		s.deadErr = err
		close(s.dead)
	}
}

func (s *Sandbox) deadError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadErr
}

// send sends a request and registers it for init's reply. j is the job an
// exec or files request starts.
func (s *Sandbox) send(m *message, fds ...int) (*request, error) {
	return s.sendJob(m, nil, fds...)
}

func (s *Sandbox) sendJob(m *message, j *job, fds ...int) (*request, error) {
	s.mu.Lock()
	if s.deadErr != nil {
		err := s.deadErr
		s.mu.Unlock()
		return nil, err
	}
	s.seq++
	m.Seq = s.seq
	r := &request{typ: m.Type, reply: make(chan *message, 1), job: j}
	s.pending[m.Seq] = r
	if j != nil {
		s.jobs[j.id] = j
	}
	s.mu.Unlock()
	if err := s.ch.send(m, fds...); err != nil {
		s.mu.Lock()
		delete(s.pending, m.Seq)
		if j != nil {
			delete(s.jobs, j.id)
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	return r, nil
}

// await waits for the reply to r, for the channel to die, or for ctx.
func (s *Sandbox) await(ctx context.Context, r *request) (*message, error) {
	select {
	case m := <-r.reply:
		return m, nil
	case <-s.dead:
		select {
		case m := <-r.reply:
			return m, nil
		default:
		}
		return nil, s.deadError()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// replies lists the reply types each request may get.
var replies = map[string][]string{
	msgConfig: {msgReady, msgSetupError, msgError},
	msgStart:  {msgOK, msgError},
	msgExec:   {msgStarted, msgExecError, msgError},
	msgFiles:  {msgStarted, msgError},
	msgSignal: {msgOK, msgError},
}

// readLoop reads init's messages until the channel ends. A message that
// breaks the protocol kills the sandbox: init is not doing what it must.
func (s *Sandbox) readLoop() {
	defer close(s.readerDone)
	for {
		m, fds, err := s.ch.recv()
		if err == nil {
			err = checkFromInit(m, len(fds))
			if err == nil && m.Type == msgReady && len(fds) > 0 {
				m.fds, fds = fds, nil
			}
			closeFDs(fds)
		}
		if err == nil {
			err = s.deliver(m)
		}
		if errors.Is(err, io.EOF) {
			s.initExited()
			return
		}
		if err != nil {
			err = fmt.Errorf("%w: init broke the control protocol: %v", ErrSandboxGone, err)
			s.lg.Error("sandbox killed", oplog.ErrorKey, err)
			s.killAll()
			s.fail(err)
			return
		}
	}
}

// initExited records why the channel ended: destroyed, or init died.
func (s *Sandbox) initExited() {
	s.mu.Lock()
	destroyed := s.state == stateDestroyed || s.initKilled
	s.mu.Unlock()
	if destroyed {
		s.fail(fmt.Errorf("%w: destroyed", ErrSandboxGone))
		return
	}
	select {
	case <-s.gone:
	case <-time.After(time.Second):
	}
	err := fmt.Errorf("%w: init exited unexpectedly", ErrSandboxGone)
	select {
	case <-s.gone:
		err = fmt.Errorf("%w: init exited unexpectedly (%v)", ErrSandboxGone, s.initErr)
	default:
	}
	s.lg.Error("sandbox lost", oplog.ErrorKey, err)
	s.fail(err)
}

// deliver hands a checked message to whoever waits for it.
func (s *Sandbox) deliver(m *message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Type == msgExit {
		j := s.jobs[m.Exit.ID]
		if j == nil || !j.started {
			return fmt.Errorf("exit event for job %q, which is not running", m.Exit.ID)
		}
		delete(s.jobs, j.id)
		j.exit <- m.Exit
		return nil
	}
	if m.Seq == 0 {
		return fmt.Errorf("init refused a message: %s", m.Error)
	}
	r := s.pending[m.Seq]
	if r == nil {
		return fmt.Errorf("%s reply to request %d, which is not pending", m.Type, m.Seq)
	}
	ok := false
	for _, t := range replies[r.typ] {
		ok = ok || t == m.Type
	}
	if !ok {
		return fmt.Errorf("%s reply to a %s request", m.Type, r.typ)
	}
	delete(s.pending, m.Seq)
	if r.job != nil {
		if m.Type == msgStarted {
			r.job.started = true
		} else {
			delete(s.jobs, r.job.id)
		}
	}
	r.reply <- m
	return nil
}

// newJob makes the next job of kind ("x" exec, "f" files).
func (s *Sandbox) newJob(kind string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextJob++
	return &job{id: kind + strconv.Itoa(s.nextJob), exit: make(chan *exitEvent, 1)}
}
