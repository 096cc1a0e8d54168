// Command go-compat is the Go side of the lock-info comparison: it decodes
// each document with encoding/json exactly as CAPTF does and prints the
// verdict, which the Rust side compares with its own decoder.
//
// Input on stdin: records of a 4-byte little-endian length and that many raw
// bytes (raw, so that invalid UTF-8 reaches the decoder untouched).
// Output on stdout: first "go <version>", then one line per record:
//
//	ok <hex ID> <hex Operation> <hex Who> <hex Version> <created>
//	err <kind> <message>
//
// separated by tabs. <created> is "zero" for Go's zero time, else Unix
// seconds "." nine digits of nanoseconds. <kind> is "syntax",
// "type:<Field>:<JSON type>" (Field empty for the top-level value), or
// "time" for an error from time.Time.UnmarshalJSON.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// info is CAPTF's locks.Info (internal/locks/stale.go): the five fields the
// controller reads. Its json tags equal the field names, so none are needed.
// The backend also writes Info and Path; CAPTF's struct has no such fields,
// so they are unknown keys and any value of them is ignored.
type info struct {
	ID        string
	Operation string
	Who       string
	Version   string
	Created   time.Time
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	fmt.Fprintf(out, "go %s\n", runtime.Version())
	var size [4]byte
	for {
		if _, err := io.ReadFull(in, size[:]); err == io.EOF {
			return
		} else if err != nil {
			fail(err)
		}
		doc := make([]byte, binary.LittleEndian.Uint32(size[:]))
		if _, err := io.ReadFull(in, doc); err != nil {
			fail(err)
		}
		verdict(out, doc)
	}
}

func verdict(out *bufio.Writer, doc []byte) {
	var v info
	err := json.Unmarshal(doc, &v)
	if err == nil {
		created := "zero"
		if !v.Created.IsZero() {
			created = fmt.Sprintf("%d.%09d", v.Created.Unix(), v.Created.Nanosecond())
		}
		fmt.Fprintf(out, "ok\t%s\t%s\t%s\t%s\t%s\n", hex.EncodeToString([]byte(v.ID)),
			hex.EncodeToString([]byte(v.Operation)), hex.EncodeToString([]byte(v.Who)),
			hex.EncodeToString([]byte(v.Version)), created)
		return
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	kind := "time"
	switch {
	case errors.As(err, &syntax):
		kind = "syntax"
	case errors.As(err, &typ):
		kind = fmt.Sprintf("type:%s:%s", typ.Field, typ.Value)
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	fmt.Fprintf(out, "err\t%s\t%q\n", kind, msg)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-compat:", err)
	os.Exit(2)
}
