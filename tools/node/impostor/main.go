// Command impostor is the node stage's stand-in for whoever takes over a scrape target's address
// (tests/node): a TLS server on the metrics port with a self-signed certificate for the same DNS
// names as the real exporter's, which no CA Prometheus trusts signed. It prints one JSON line per
// connection: the handshake's outcome and, when a request got through, its method, path and
// whether it carried an Authorization header (never the header's value), so the test can show
// what a verifying Prometheus hands such a target: nothing.
//
// usage: impostor -listen :9820 -name <dns name>...
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

type event struct {
	Time          string `json:"time"`
	Remote        string `json:"remote"`
	Event         string `json:"event"`
	Error         string `json:"error,omitempty"`
	Method        string `json:"method,omitempty"`
	Path          string `json:"path,omitempty"`
	Authorization bool   `json:"authorization"`
	UserAgent     string `json:"userAgent,omitempty"`
}

func emit(e event) {
	e.Time = time.Now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(e)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println(string(b))
}

func selfSigned(names []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// handshakeLogger reports each connection's handshake on its own, since http.Server only logs a
// failed one as text.
type handshakeLogger struct{ net.Listener }

func (l handshakeLogger) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return c, nil
	}
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = tc.SetDeadline(time.Time{}) }()
	if err := tc.Handshake(); err != nil {
		emit(event{Remote: c.RemoteAddr().String(), Event: "handshake failed", Error: err.Error()})
		return c, nil
	}
	emit(event{Remote: c.RemoteAddr().String(), Event: "handshake done"})
	return c, nil
}

func main() {
	listen := flag.String("listen", ":9820", "address to serve TLS on")
	names := flag.String("name", "", "comma-separated DNS names for the certificate")
	flag.Parse()
	list := strings.Split(*names, ",")
	if *names == "" || len(list) == 0 {
		fmt.Fprintln(os.Stderr, "impostor: -name is required")
		os.Exit(2)
	}
	cert, err := selfSigned(list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "impostor:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "impostor:", err)
		os.Exit(1)
	}
	tlsLn := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	emit(event{Event: "listening", Path: *listen})
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			emit(event{Remote: r.RemoteAddr, Event: "request", Method: r.Method, Path: r.URL.Path,
				Authorization: r.Header.Get("Authorization") != "", UserAgent: r.UserAgent()})
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			// false lock data, as an impostor would serve
			fmt.Fprintln(w, "captf_state_locks_held{class=\"foreign\"} 0")
		}),
	}
	if err := srv.Serve(handshakeLogger{tlsLn}); err != nil {
		fmt.Fprintln(os.Stderr, "impostor:", err)
		os.Exit(1)
	}
}
