//go:build linux

package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ckf-stream/ckf-stream/testenv"
	"gopkg.in/yaml.v3"
)

// helmBin is the helm binary the chart tests run: $HELM, else the one make builds into bin/.
func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		matches, _ := filepath.Glob("../bin/helm-*/helm")
		if len(matches) > 0 {
			bin = matches[len(matches)-1]
		}
	}
	if _, err := os.Stat(bin); bin == "" || err != nil {
		const need = "the chart tests need helm: build it with `make helm` (Helm from the Go module proxy, into bin/), or set HELM to a helm binary"
		if !testenv.Required() { // go test ./... and make test-unit on a fresh clone, with no network
			t.Skipf("%s (skipped: %s=1, which make test sets, makes this a failure)", need, testenv.RequireEnv)
		}
		t.Fatal(need)
	}
	return bin
}

// k8sObject is the part of a rendered object the checks read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Replicas *int `yaml:"replicas"`
		Template struct {
			Spec struct {
				EnableServiceLinks *bool          `yaml:"enableServiceLinks"`
				Containers         []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
		Groups []any `yaml:"groups"`
	} `yaml:"spec"`
	Data map[string]string `yaml:"data"`
}

type k8sContainer struct {
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
	} `yaml:"resources"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

func (c k8sContainer) env(name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestHelmChart lints and renders deploy/helm/ckf-stream with Helm (built from the Go module
// proxy by make) and checks the rendered objects against the processes: a relay Deployment per
// DC and the indexer's; each container runs a processor command, listens where its port and probes
// say (/healthz for liveness, which answers from process start; /readyz for readiness), requests
// resources, and sets only variables that `processor help config` lists; relays and indexer agree
// on the filter size and the lane map; the ServiceMonitor scrapes /metrics on that port; the
// PrometheusRule is deploy/prometheus/alerts.yml and the dashboard ConfigMap
// deploy/grafana/ckf-stream.json, as they are.
func TestHelmChart(t *testing.T) {
	helm := helmBin(t)
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(helm, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.Bytes(), errOut.Bytes())
		}
		return out.Bytes()
	}
	run("lint", "--strict", "helm/ckf-stream", "--set", "domain="+testDomain)
	rendered := run("template", "demo", "helm/ckf-stream", "--set", "domain="+testDomain)

	help, err := exec.Command(processorBin, "help", "config").Output()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range strings.Fields(string(help)) {
		known[strings.TrimSuffix(f, ",")] = true
	}

	var objs []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("rendered chart: %v", err)
		}
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
	kinds := map[string]int{}
	var relays, indexers, workers []k8sObject
	for _, o := range objs {
		kinds[o.Kind]++
		switch {
		case o.Kind == "Deployment" && o.Metadata.Labels["app.kubernetes.io/component"] == "relay":
			relays = append(relays, o)
		case o.Kind == "Deployment" && o.Metadata.Labels["app.kubernetes.io/component"] == "indexer":
			indexers = append(indexers, o)
		case o.Kind == "Deployment" && o.Metadata.Labels["app.kubernetes.io/component"] == "workers":
			workers = append(workers, o)
		}
	}
	if len(relays) != 2 || len(indexers) != 1 || indexers[0].Spec.Replicas == nil || *indexers[0].Spec.Replicas != 2 ||
		kinds["ServiceMonitor"] != 1 || kinds["PrometheusRule"] != 1 || kinds["ConfigMap"] != 1 || kinds["Service"] != 5 {
		t.Fatalf("rendered %v, %d relays, %d indexer deployments; want 2 relays (one per DC of values.yaml), one indexer of 2 replicas, and 5 Services (indexer, relays, worker stages, one per DC's worker stage)", kinds, len(relays), len(indexers))
	}
	if len(workers) != 2 || workers[0].Spec.Replicas == nil || *workers[0].Spec.Replicas != 2 {
		t.Fatalf("%d worker-stage deployments; want one per DC of values.yaml, 2 replicas each", len(workers))
	}
	blocks := map[string]bool{}
	for _, d := range append(append(slices.Clone(relays), indexers...), workers...) {
		if se := d.Spec.Template.Spec.EnableServiceLinks; se == nil || *se {
			t.Errorf("%s: enableServiceLinks is not false (service links add CKF_*_SERVICE_HOST variables)", d.Metadata.Name)
		}
		if len(d.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", d.Metadata.Name, len(d.Spec.Template.Spec.Containers))
		}
		c := d.Spec.Template.Spec.Containers[0]
		want := d.Metadata.Labels["app.kubernetes.io/component"]
		if len(c.Args) != 1 || c.Args[0] != want {
			t.Errorf("%s: args %q, want [%s]", d.Metadata.Name, c.Args, want)
		}
		listen, _ := c.env("CKF_HTTP_LISTEN")
		host, port, err := net.SplitHostPort(listen)
		if err != nil || host != "0.0.0.0" || len(c.Ports) != 1 || c.Ports[0].Name != "http" || port != strconv.Itoa(c.Ports[0].ContainerPort) {
			t.Errorf("%s: CKF_HTTP_LISTEN %q and ports %+v disagree (or listen on loopback only)", d.Metadata.Name, listen, c.Ports)
		}
		if p := c.LivenessProbe; p == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != "http" {
			t.Errorf("%s: liveness probe %+v, want /healthz on http", d.Metadata.Name, p)
		}
		if p := c.ReadinessProbe; p == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port != "http" {
			t.Errorf("%s: readiness probe %+v, want /readyz on http", d.Metadata.Name, p)
		}
		if c.Resources.Requests["memory"] == "" || c.Resources.Requests["cpu"] == "" {
			t.Errorf("%s: no resource requests", d.Metadata.Name)
		}
		for _, e := range c.Env {
			if !known[e.Name] {
				t.Errorf("%s sets %s, which processor help config does not list", d.Metadata.Name, e.Name)
			}
		}
		for _, name := range []string{"CKF_RELAY_EXPECTED_BLOCKS", "CKF_INDEXER_EXPECTED_BLOCKS_PER_DC"} {
			if v, ok := c.env(name); ok {
				blocks[v] = true
			}
		}
		if lanes, _ := c.env("CKF_INDEXER_LANES"); want == "relay" {
			dc, _ := c.env("CKF_RELAY_DC_ID")
			lane, _ := c.env("CKF_RELAY_LANE")
			if !slices.Contains(strings.Split(lanes, ","), lane+"="+dc) {
				t.Errorf("%s: lane %s of DC %s is not in CKF_INDEXER_LANES %q", d.Metadata.Name, lane, dc, lanes)
			}
		}
	}
	if len(blocks) != 1 {
		t.Errorf("relays and indexer size the filter differently: %v", blocks)
	}
	alerts, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(alerts, &want); err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile("grafana/ckf-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o.Kind {
		case "ServiceMonitor":
			if len(o.Spec.Endpoints) != 1 || o.Spec.Endpoints[0].Port != "http" || o.Spec.Endpoints[0].Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoints %+v, want /metrics on http", o.Spec.Endpoints)
			}
		case "PrometheusRule":
			if !reflect.DeepEqual(o.Spec.Groups, want.Groups) {
				t.Errorf("the PrometheusRule's groups differ from deploy/prometheus/alerts.yml")
			}
		case "ConfigMap":
			if strings.TrimSpace(o.Data["ckf-stream.json"]) != strings.TrimSpace(string(dash)) {
				t.Errorf("the dashboard ConfigMap differs from deploy/grafana/ckf-stream.json")
			}
		}
	}
}

// TestHelmChartLocked renders the chart with every access setting on (Kafka over TLS with a client
// certificate and SCRAM, HTTPS with client certificates and a bearer token) and checks that each
// file a setting names is in a mounted Secret, that the SASL password comes from a Secret key and
// not from a value, that the probes speak HTTPS, and that the ServiceMonitor presents what the
// locked /metrics asks for. Values that cannot work together fail the render.
func TestHelmChartLocked(t *testing.T) {
	helm := helmBin(t)
	locked := []string{"--set", strings.Join([]string{
		"domain=" + testDomain, "kafka.tls.enabled=true", "kafka.tls.secretName=kafka-tls", "kafka.tls.clientCertificate=true",
		"kafka.sasl.mechanism=SCRAM-SHA-512", "kafka.sasl.username=ckf", "kafka.sasl.passwordSecret.name=kafka-password",
		"http.tls.secretName=http-tls", "http.tls.requireClientCertificates=true",
		"http.auth.tokenSecret.name=http-token", "monitoring.scrapeClientSecret=prometheus-client",
	}, ",")}
	render := func(args ...string) ([]byte, error) {
		cmd := exec.Command(helm, append([]string{"template", "demo", "helm/ckf-stream"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return nil, errors.New(errOut.String())
		}
		return out.Bytes(), nil
	}
	if out, err := exec.Command(helm, append([]string{"lint", "--strict", "helm/ckf-stream"}, locked...)...).CombinedOutput(); err != nil {
		t.Fatalf("helm lint with the access settings: %v\n%s", err, out)
	}
	rendered, err := render(locked...)
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		HTTPGet struct {
			Scheme string `yaml:"scheme"`
		} `yaml:"httpGet"`
	}
	type container struct {
		Env []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				SecretKeyRef struct{ Name, Key string } `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
		LivenessProbe  probe `yaml:"livenessProbe"`
		ReadinessProbe probe `yaml:"readinessProbe"`
	}
	type object struct {
		Kind     string `yaml:"kind"`
		Metadata struct{ Name string }
		Spec     struct {
			Template struct {
				Spec struct {
					Containers []container `yaml:"containers"`
					Volumes    []struct {
						Name   string `yaml:"name"`
						Secret struct {
							SecretName string `yaml:"secretName"`
						} `yaml:"secret"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
			Endpoints []map[string]any `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	// The file every setting names, and the Secret whose volume must hold it.
	files := map[string][2]string{
		"CKF_KAFKA_TLS_CA_FILE":           {"/etc/ckf/kafka-tls/ca.crt", "kafka-tls"},
		"CKF_KAFKA_TLS_CERT_FILE":         {"/etc/ckf/kafka-tls/tls.crt", "kafka-tls"},
		"CKF_KAFKA_TLS_KEY_FILE":          {"/etc/ckf/kafka-tls/tls.key", "kafka-tls"},
		"CKF_HTTP_TLS_CERT_FILE":          {"/etc/ckf/http-tls/tls.crt", "http-tls"},
		"CKF_HTTP_TLS_KEY_FILE":           {"/etc/ckf/http-tls/tls.key", "http-tls"},
		"CKF_HTTP_TLS_CLIENT_CA_FILE":     {"/etc/ckf/http-tls/ca.crt", "http-tls"},
		"CKF_HTTP_AUTH_BEARER_TOKEN_FILE": {"/etc/ckf/http-token/token", "http-token"},
	}
	deployments := 0
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "Deployment":
			deployments++
			secretOf := map[string]string{}
			for _, v := range o.Spec.Template.Spec.Volumes {
				secretOf[v.Name] = v.Secret.SecretName
			}
			c := o.Spec.Template.Spec.Containers[0]
			seen := map[string]bool{}
			for _, e := range c.Env {
				seen[e.Name] = true
				if e.Name == "CKF_KAFKA_SASL_PASSWORD" {
					if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "kafka-password" || e.ValueFrom.SecretKeyRef.Key != "password" {
						t.Errorf("%s: the SASL password is not read from the Secret kafka-password: %+v", o.Metadata.Name, e)
					}
					continue
				}
				want, ok := files[e.Name]
				if !ok {
					continue
				}
				mounted := false
				for _, m := range c.VolumeMounts {
					if strings.HasPrefix(e.Value, m.MountPath+"/") && m.ReadOnly && secretOf[m.Name] == want[1] {
						mounted = true
					}
				}
				if e.Value != want[0] || !mounted {
					t.Errorf("%s: %s=%q is not in a read-only mount of the Secret %s (mounts %+v, volumes %v)", o.Metadata.Name, e.Name, e.Value, want[1], c.VolumeMounts, secretOf)
				}
			}
			for _, name := range append(slices.Collect(maps.Keys(files)), "CKF_KAFKA_TLS_ENABLED", "CKF_KAFKA_SASL_MECHANISM", "CKF_KAFKA_SASL_USERNAME", "CKF_KAFKA_SASL_PASSWORD") {
				if !seen[name] {
					t.Errorf("%s does not set %s", o.Metadata.Name, name)
				}
			}
			if c.LivenessProbe.HTTPGet.Scheme != "HTTPS" || c.ReadinessProbe.HTTPGet.Scheme != "HTTPS" {
				t.Errorf("%s: probes speak %q/%q to an HTTPS server", o.Metadata.Name, c.LivenessProbe.HTTPGet.Scheme, c.ReadinessProbe.HTTPGet.Scheme)
			}
		case "ServiceMonitor":
			ep := o.Spec.Endpoints[0]
			tlsConfig, _ := ep["tlsConfig"].(map[string]any)
			if ep["scheme"] != "https" || ep["bearerTokenSecret"] == nil || tlsConfig["ca"] == nil || tlsConfig["cert"] == nil || tlsConfig["keySecret"] == nil {
				t.Errorf("ServiceMonitor endpoint %v does not present the token, trust the server's CA and present a client certificate", ep)
			}
		}
	}
	if deployments != 5 { // a relay and a worker stage per DC of values.yaml, the indexer
		t.Fatalf("%d deployments rendered, want 5", deployments)
	}
	for _, bad := range []struct{ set, want string }{
		{"kafka.sasl.mechanism=SCRAM-SHA-512,kafka.sasl.username=ckf", "kafka.sasl.passwordSecret.name is required"},
		{"http.tls.requireClientCertificates=true", "http.tls.requireClientCertificates needs http.tls.secretName"},
		{"http.tls.secretName=h,http.tls.requireClientCertificates=true", "monitoring.scrapeClientSecret is required"},
	} {
		if _, err := render("--set", "domain="+testDomain+","+bad.set); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %s: %v; want an error saying %q", bad.set, err, bad.want)
		}
	}
}
