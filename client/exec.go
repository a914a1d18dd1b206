package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// stdinGrace is how long Exec waits, after its command ended, for the
// daemon's answer to the stdin stream (to report a refusal), before it
// cancels that call.
const stdinGrace = time.Second

// maxFrame bounds one line of an exec stream (a frame of output is far
// smaller; a longer line is a broken stream, not a reason to use memory).
const maxFrame = 16 << 20

// ExecIO is where an exec's standard streams come from and go to. A nil
// Stdin means none (or ExecRequest.Stdin, given whole); nil writers discard.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// StdinError is a failure to stream an exec's standard input; Exec returns
// it beside the result when the command ran to its end anyway.
type StdinError struct{ Err error }

func (e *StdinError) Error() string { return "stdin: " + e.Err.Error() }
func (e *StdinError) Unwrap() error { return e.Err }

// Exec runs a command in sandbox id and streams its output to io's writers
// as the daemon sends it, and io.Stdin (when set) to the command through
// PUT .../stdin; EOF on io.Stdin closes the command's stdin. It returns how
// the command ended; a command that could not be started is a result with
// ExitStatus 126 or 127 and Error set, not an error. Cancelling ctx closes the
// request, which kills the command on the server.
//
// When io.Stdin is still blocked in Read after the command ended, Exec
// returns anyway; the transport's goroutine reading it ends when that Read
// returns.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest, eio ExecIO) (*api.ExecResult, error) {
	if eio.Stdin != nil {
		if req.Stdin != "" {
			return nil, errors.New("exec: both ExecRequest.Stdin and ExecIO.Stdin are set")
		}
		req.StdinStream = true
	}
	s, err := c.StartExec(ctx, id, req)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if eio.Stdin == nil {
		return s.Wait(eio.Stdout, eio.Stderr)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdinDone := make(chan error, 1)
	go func() { stdinDone <- s.Stdin(sctx, eio.Stdin) }()
	res, err := s.Wait(eio.Stdout, eio.Stderr)
	// The exec has ended (or its stream failed). The daemon answers a stdin
	// call when its exec ends; one that has not answered within stdinGrace
	// is cancelled.
	grace := time.NewTimer(stdinGrace)
	defer grace.Stop()
	var serr error
	select {
	case serr = <-stdinDone:
	case <-grace.C:
		cancel()
		<-stdinDone
	}
	if err != nil {
		return nil, err
	}
	if serr != nil && !stdinEndedWithExec(serr) {
		return res, &StdinError{Err: serr}
	}
	return res, nil
}

// stdinEndedWithExec says a stdin stream failed only because its exec had
// already ended (the daemon no longer knows it or refuses more input).
func stdinEndedWithExec(err error) bool {
	switch Code(err) {
	case api.CodeNotFound, api.CodeConflict:
		return true
	}
	return errors.Is(err, context.Canceled)
}

// ExecStream is one running exec's response stream: its frames in order, the
// last one "exit". Close it when done; closing it before the exit frame
// disconnects, which kills the command on the server.
type ExecStream struct {
	c       *Client
	ctx     context.Context
	sandbox string
	execID  string
	pid     int
	body    io.ReadCloser
	r       *bufio.Reader
	pending *api.Frame // the first frame, read by StartExec
	result  *api.ExecResult
	err     error // sticky: io.EOF after the exit frame
	once    sync.Once
}

// StartExec starts a command in sandbox id and returns its stream once the
// daemon has answered with its first frame. With req.StdinStream, send the
// input with (*ExecStream).Stdin. An error frame in place of the first frame
// is returned as its *api.Error.
func (c *Client) StartExec(ctx context.Context, id string, req api.ExecRequest) (*ExecStream, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: sandboxPath(id, "exec"),
		body: bytes.NewReader(b), contentType: "application/json"})
	if err != nil {
		return nil, err
	}
	s := &ExecStream{c: c, ctx: ctx, sandbox: id, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10)}
	f, err := s.Next()
	if err != nil {
		s.Close()
		return nil, err
	}
	switch f.Type {
	case api.FrameStarted:
		s.execID, s.pid = f.ExecID, f.PID
	case api.FrameExit:
		s.execID = f.Result.ExecID
	default:
		s.Close()
		return nil, fmt.Errorf("exec: first frame is %q, want %q", f.Type, api.FrameStarted)
	}
	s.pending = &f
	return s, nil
}

// ExecID is the exec's id (for Signal, Stdin and GET .../execs).
func (s *ExecStream) ExecID() string { return s.execID }

// PID is the command's pid inside the sandbox (0 if it never started).
func (s *ExecStream) PID() int { return s.pid }

// Result is how the exec ended, once Next has returned its exit frame.
func (s *ExecStream) Result() *api.ExecResult { return s.result }

// Next returns the next frame: "started" first, then "stdout" and "stderr"
// (their Data is valid base64; Data decodes it), then "exit", after which it
// returns io.EOF. An "error" frame is returned as its *api.Error, a stream
// that ends early as an error wrapping io.ErrUnexpectedEOF, a cancelled
// context as its error.
func (s *ExecStream) Next() (api.Frame, error) {
	if p := s.pending; p != nil {
		s.pending = nil
		return *p, nil
	}
	if s.err != nil {
		return api.Frame{}, s.err
	}
	f, err := s.read()
	if err != nil {
		s.err = err
		return api.Frame{}, err
	}
	return f, nil
}

func (s *ExecStream) read() (api.Frame, error) {
	line, err := readLine(s.r, maxFrame)
	if err != nil {
		if s.ctx.Err() != nil {
			return api.Frame{}, fmt.Errorf("exec %s: %w", s.execID, s.ctx.Err())
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return api.Frame{}, fmt.Errorf("exec %s: stream ended before its exit frame: %w", s.execID, err)
	}
	var f api.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return api.Frame{}, fmt.Errorf("exec %s: bad frame %.80q: %w", s.execID, line, err)
	}
	switch f.Type {
	case api.FrameStdout, api.FrameStderr:
		if _, err := base64.StdEncoding.DecodeString(f.Data); err != nil {
			return api.Frame{}, fmt.Errorf("exec %s: %s frame: data: %w", s.execID, f.Type, err)
		}
	case api.FrameExit:
		if f.Result == nil {
			return api.Frame{}, fmt.Errorf("exec %s: exit frame without a result", s.execID)
		}
		s.result = f.Result
		s.err = io.EOF
		// Read the (empty) rest so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(s.r, maxErrorBody))
	case api.FrameError:
		if f.Error == nil {
			return api.Frame{}, fmt.Errorf("exec %s: error frame without an error", s.execID)
		}
		return api.Frame{}, f.Error
	case api.FrameStarted:
	default:
		return api.Frame{}, fmt.Errorf("exec %s: unknown frame type %q", s.execID, f.Type)
	}
	return f, nil
}

// Frames iterates over the stream's frames until the exit frame (included);
// a failure is yielded once as the last pair.
func (s *ExecStream) Frames() iter.Seq2[api.Frame, error] {
	return func(yield func(api.Frame, error) bool) {
		for {
			f, err := s.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(f, err) || err != nil {
				return
			}
		}
	}
}

// Data is the bytes of a stdout or stderr frame (nil for other frames).
func Data(f api.Frame) []byte {
	b, _ := base64.StdEncoding.DecodeString(f.Data)
	return b
}

// Close ends the stream. Before the exit frame it disconnects, and the
// daemon kills the command.
func (s *ExecStream) Close() error {
	s.once.Do(func() { s.body.Close() })
	return nil
}

// Stdin streams r to the exec's standard input (PUT .../stdin) until EOF,
// which closes it. The exec must have been started with StdinStream.
func (s *ExecStream) Stdin(ctx context.Context, r io.Reader) error {
	return s.c.Stdin(ctx, s.sandbox, s.execID, r)
}

// Signal sends sig ("TERM", "KILL", "INT", ...) to the exec's process group.
func (s *ExecStream) Signal(ctx context.Context, sig string) error {
	return s.c.Signal(ctx, s.sandbox, s.execID, sig)
}

// Wait writes the stream's remaining output to stdout and stderr (nil
// discards) as it arrives, until the exit frame, and returns the result.
func (s *ExecStream) Wait(stdout, stderr io.Writer) (*api.ExecResult, error) {
	for f, err := range s.Frames() {
		if err != nil {
			return nil, err
		}
		w := stdout
		if f.Type == api.FrameStderr {
			w = stderr
		} else if f.Type != api.FrameStdout {
			continue
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(Data(f)); err != nil {
			return nil, fmt.Errorf("exec %s: writing its %s: %w", s.execID, f.Type, err)
		}
	}
	if s.result == nil {
		return nil, fmt.Errorf("exec %s: stream ended before its exit frame: %w", s.execID, io.ErrUnexpectedEOF)
	}
	return s.result, nil
}

// Stdin streams r to the standard input of exec execID in sandbox id until
// EOF, which closes it. It returns when the daemon has answered or ctx ends;
// a Read of r blocked at that moment is not waited for (the goroutine in it
// ends when it returns).
func (c *Client) Stdin(ctx context.Context, id, execID string, r io.Reader) error {
	body, stop := interruptible(ctx, r)
	defer stop()
	resp, err := c.do(ctx, request{method: http.MethodPut, path: sandboxPath(id, "execs", execID, "stdin"),
		body: body, contentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// Signal sends sig ("TERM", "SIGTERM", "KILL", "INT", "HUP", ...) to the
// process group of exec execID in sandbox id.
func (c *Client) Signal(ctx context.Context, id, execID, sig string) error {
	return c.doJSON(ctx, http.MethodPost, sandboxPath(id, "execs", execID, "signal"), nil, api.SignalRequest{Signal: sig}, nil)
}

// Execs lists the sandbox's execs: the running ones and the last finished.
func (c *Client) Execs(ctx context.Context, id string) ([]api.Exec, error) {
	var out []api.Exec
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "execs"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// readLine reads one '\n'-terminated line (without it) of at most max bytes.
// A last line without '\n' is returned with a nil error only if not empty.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("a line longer than %d bytes", max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

// interruptible returns a body that reads r through a pipe, so a request
// whose context ends returns at once even while a Read of r blocks: the
// transport waits for its body reads to end, and closing the pipe ends them.
// The goroutine copying r ends when r's Read returns. stop closes the pipe.
func interruptible(ctx context.Context, r io.Reader) (io.ReadCloser, func()) {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
	}()
	stopAfter := context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	return pr, func() {
		stopAfter()
		pr.CloseWithError(errors.New("request ended"))
	}
}
