// Command healthcheck is the container image's health probe: it asks a processor's /readyz over
// loopback and exits 0 when the answer is 200, else 1 with the answer's first line (for
// docker inspect). The runtime image has no shell, curl or wget, so docker-compose.yml's
// healthchecks run this binary, which the Dockerfile builds beside the processor.
//
//	healthcheck [URL]
//
// Without a URL it asks http://127.0.0.1:<port>/readyz, the port of CKF_HTTP_LISTEN (8080 when
// unset), over HTTPS when CKF_HTTP_TLS_CERT_FILE is set. Over HTTPS it does not verify the
// certificate, as the kubelet's probes do not: it speaks to its own container, and a certificate
// names the service, not 127.0.0.1.
package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// timeout bounds the whole request; compose's healthcheck timeout is longer.
const timeout = 3 * time.Second

func main() {
	url, err := target(os.Args[1:], os.Getenv)
	if err == nil {
		err = check(url)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

// target is the URL to ask: the one argument, else /readyz on loopback at CKF_HTTP_LISTEN's port.
func target(args []string, getenv func(string) string) (string, error) {
	switch len(args) {
	case 0:
	case 1:
		if strings.HasPrefix(args[0], "-") {
			return "", errors.New("usage: healthcheck [URL] (default: /readyz at CKF_HTTP_LISTEN's port on 127.0.0.1)")
		}
		return args[0], nil
	default:
		return "", errors.New("usage: healthcheck [URL] (default: /readyz at CKF_HTTP_LISTEN's port on 127.0.0.1)")
	}
	port := "8080"
	if listen := getenv("CKF_HTTP_LISTEN"); listen != "" {
		_, p, err := net.SplitHostPort(listen)
		if err != nil || p == "" || p == "0" {
			return "", fmt.Errorf("CKF_HTTP_LISTEN %q names no port to ask", listen)
		}
		port = p
	}
	scheme := "http"
	if getenv("CKF_HTTP_TLS_CERT_FILE") != "" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort("127.0.0.1", port) + "/readyz", nil
}

// check asks url and returns nil on a 200 answer, else an error naming the status and the
// answer's first line (the reason /readyz gives).
func check(url string) error {
	client := &http.Client{
		Timeout: timeout,
		// #nosec G402 -- loopback to its own container, as a kubelet probe.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(io.LimitReader(resp.Body, 512)).ReadString('\n')
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(line))
	}
	return nil
}
