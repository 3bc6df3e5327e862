// Command loadgen is the gateway benchmark's compiled load generator (bench/gateway.py --loadgen go).
//
// C workers each send N streaming requests, one after the other, on one keep-alive HTTP/1.1
// connection, and time each: time to the first token event, time to the end, tokens seen (SSE
// events whose "content" or "text" is a non-empty string, the same rule as bench/_common.py).
// It writes one JSON object to stdout: {"samples": [[ttft_s, total_s, tokens], ...],
// "errors": n, "wall_s": s}. Raw sockets and a hand-written chunked reader, so that its own
// CPU per event stays far below the proxies it measures (its ceiling is measured by the bench
// against the upstream directly).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

type sample [3]float64

type worker struct {
	addr, head string
	body       []byte
	conn       net.Conn
	rd         *bufio.Reader
	buf        []byte
}

var (
	keyContent = []byte(`"content":`)
	keyText    = []byte(`"text":`)
	crlf       = []byte("\r\n")
)

// tokens counts the values of "content"/"text" keys in data that are non-empty strings.
func tokens(data []byte) int {
	n := 0
	for _, key := range [][]byte{keyContent, keyText} {
		rest := data
		for {
			i := bytes.Index(rest, key)
			if i < 0 {
				break
			}
			rest = rest[i+len(key):]
			j := 0
			for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t') {
				j++
			}
			if j+1 < len(rest) && rest[j] == '"' && rest[j+1] != '"' {
				n++
			}
		}
	}
	return n
}

func (w *worker) close() {
	if w.conn != nil {
		w.conn.Close()
		w.conn, w.rd = nil, nil
	}
}

func (w *worker) request(deadline time.Duration) (sample, error) {
	if w.conn == nil {
		c, err := net.Dial("tcp", w.addr)
		if err != nil {
			return sample{}, err
		}
		w.conn, w.rd = c, bufio.NewReaderSize(c, 1<<16)
	}
	w.conn.SetDeadline(time.Now().Add(deadline))
	start := time.Now()
	if _, err := w.conn.Write(append([]byte(w.head), w.body...)); err != nil {
		return sample{}, err
	}
	status, chunked, length, closing := 0, false, -1, false
	for {
		line, err := w.rd.ReadSlice('\n')
		if err != nil {
			return sample{}, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if status == 0 {
			if len(line) < 12 {
				return sample{}, fmt.Errorf("bad status line %q", line)
			}
			status, _ = strconv.Atoi(string(line[9:12]))
			continue
		}
		lower := bytes.ToLower(line)
		switch {
		case bytes.HasPrefix(lower, []byte("transfer-encoding:")) && bytes.Contains(lower, []byte("chunked")):
			chunked = true
		case bytes.HasPrefix(lower, []byte("content-length:")):
			length, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		case bytes.HasPrefix(lower, []byte("connection:")) && bytes.Contains(lower, []byte("close")):
			closing = true
		}
	}
	var ttft float64
	count := 0
	if chunked {
		for {
			line, err := w.rd.ReadSlice('\n')
			if err != nil {
				return sample{}, err
			}
			line = bytes.TrimRight(line, "\r\n")
			if i := bytes.IndexByte(line, ';'); i >= 0 {
				line = line[:i]
			}
			size, err := strconv.ParseInt(string(line), 16, 64)
			if err != nil {
				return sample{}, fmt.Errorf("bad chunk size %q", line)
			}
			if size == 0 {
				if _, err := w.rd.ReadSlice('\n'); err != nil {
					return sample{}, err
				}
				break
			}
			if cap(w.buf) < int(size)+2 {
				w.buf = make([]byte, size+2)
			}
			data := w.buf[:size+2]
			if _, err := io.ReadFull(w.rd, data); err != nil {
				return sample{}, err
			}
			if !bytes.HasSuffix(data, crlf) {
				return sample{}, errors.New("chunk not followed by CRLF")
			}
			found := tokens(data[:size])
			if found > 0 && count == 0 {
				ttft = time.Since(start).Seconds()
			}
			count += found
		}
	} else if length > 0 {
		if _, err := w.rd.Discard(length); err != nil {
			return sample{}, err
		}
	}
	total := time.Since(start).Seconds()
	if closing {
		w.close()
	}
	if status != 200 {
		return sample{}, fmt.Errorf("HTTP %d", status)
	}
	return sample{ttft, total, float64(count)}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "host:port")
	path := flag.String("path", "/v1/chat/completions", "request path")
	bodyFile := flag.String("body", "", "file with the JSON request body")
	key := flag.String("key", "", "bearer token")
	concurrency := flag.Int("c", 1, "workers (concurrent streams)")
	perWorker := flag.Int("n", 1, "requests per worker")
	timeout := flag.Duration("timeout", 120*time.Second, "limit per request")
	stagger := flag.Duration("stagger", 0, "spread the workers' first requests evenly over this long (0: all at once)")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n",
		*path, *addr, len(body))
	if *key != "" {
		head += "authorization: Bearer " + *key + "\r\n"
	}
	head += "\r\n"
	var mu sync.Mutex
	samples := make([]sample, 0, *concurrency**perWorker)
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < *concurrency; i++ {
		wg.Add(1)
		delay := time.Duration(int64(*stagger) * int64(i) / int64(*concurrency))
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			w := &worker{addr: *addr, head: head, body: body}
			defer w.close()
			for j := 0; j < *perWorker; j++ {
				s, err := w.request(*timeout)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					samples = append(samples, s)
				}
				mu.Unlock()
				if err != nil {
					w.close()
				}
			}
		}()
	}
	wg.Wait()
	out := map[string]any{"samples": samples, "errors": errs, "wall_s": time.Since(start).Seconds()}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
