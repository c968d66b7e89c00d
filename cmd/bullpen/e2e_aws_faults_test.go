package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
)

// faultsConfig is the end-to-end configuration with a hot pool of two.
var faultsConfig = strings.Replace(e2eConfig, "stopped: 3", "hot: 2", 1)

// sharedOnGate bootstraps a table and queues of the test's own on the
// emulator and returns the serve flags that reach them through gate.
func sharedOnGate(t *testing.T, gate *mototest.Gate) []string {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "testing")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testing")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "bullpen-faults-" + hex.EncodeToString(b)
	state := []string{"--store", "dynamodb://" + name, "--queue", "sqs://" + name + "-", "--aws-region", mototest.Region}
	out, err := exec.Command(bin, append(append([]string{"aws", "bootstrap"}, state...), "--aws-endpoint", mototest.Endpoint(t))...).CombinedOutput()
	if err != nil {
		t.Fatalf("bullpen aws bootstrap: %v\n%s", err, out)
	}
	return append(state, "--aws-endpoint", gate.URL)
}

// health is serve's /healthz: its status code and what it says of the
// store.
func (s *server) health() (int, string) {
	s.t.Helper()
	resp, err := http.Get(s.base + "/healthz")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		StoreError string `json:"store_error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode, h.StoreError
}

// While DynamoDB and SQS throttle every call, serve refuses the deliveries
// it cannot store (to be redelivered), says on /healthz and in its logs
// what is wrong and what to do, and loses none of the jobs it accepted
// before; once AWS answers again it serves them all, and the redelivered
// ones, each on its own instance.
func TestServeRidesOutAWSThrottling(t *testing.T) {
	if testing.Short() {
		t.Skip("serve on the emulator")
	}
	gate := mototest.NewGate(t)
	s := startServerWith(t, faultsConfig, append([]string{"--sim-latency", "zero", "--converge-every", "500ms"}, sharedOnGate(t, gate)...)...)
	s.eventually("the pool is hot", 60*time.Second, func() bool { return s.poolCounts("small-x64")["ready_hot"] == 2 })

	const n, first = 6, 7_300_001
	bodies := queuedFor(t, n, first, "runs-on=%d/pool=small-x64")
	sigs := signAll(s.secret, bodies)
	for i := range n / 2 {
		if code, body := s.post(fmt.Sprint("faults-", i), bodies[i], sigs[i]); code != http.StatusAccepted {
			t.Fatalf("delivery %d before the throttling: %d %s", i, code, body)
		}
	}
	gate.Fail(mototest.Throttled)
	for i := n / 2; i < n; i++ {
		if code, body := s.post(fmt.Sprint("faults-", i), bodies[i], sigs[i]); code != http.StatusServiceUnavailable {
			t.Fatalf("delivery %d while SQS throttles: %d %s, want 503 so that it is redelivered", i, code, body)
		}
	}
	s.eventually("/healthz reports the throttling", 60*time.Second, func() bool {
		code, why := s.health()
		return code == http.StatusServiceUnavailable && strings.Contains(why, "throttled by AWS")
	})
	gate.Pass()
	for i := n / 2; i < n; i++ {
		if code, body := s.post(fmt.Sprint("faults-", i), bodies[i], sigs[i]); code != http.StatusAccepted {
			t.Fatalf("redelivery %d once AWS answers: %d %s", i, code, body)
		}
	}
	var list struct{ Jobs []api.JobView }
	s.eventually("every job served", 120*time.Second, func() bool {
		s.get("/api/v1/jobs?limit=100", &list)
		served := 0
		for _, j := range list.Jobs {
			if j.InstanceID != "" && j.Status != "queued" {
				served++
			}
		}
		return served == n
	})
	seen := map[string]int64{}
	for _, j := range list.Jobs {
		if other, dup := seen[j.InstanceID]; dup {
			t.Errorf("instance %s serves jobs %d and %d", j.InstanceID, other, j.ID)
		}
		seen[j.InstanceID] = j.ID
	}
	s.eventually("/healthz is ok again", 120*time.Second, func() bool { code, _ := s.health(); return code == http.StatusOK })
	logs := s.logs.String()
	if !strings.Contains(logs, "throttled by AWS") {
		t.Errorf("no log line says AWS throttled:\n%s", logs)
	}
	t.Logf("%d ERROR lines", strings.Count(logs, "level=ERROR"))
	t.Logf("the gate refused %d calls", gate.Refused())
}

// Without credentials, serve on DynamoDB stops at start and says so,
// rather than failing each loop's first call.
func TestServeWithoutAWSCredentialsSaysSo(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, "serve", "--config", "../../examples/runs-on.yml", "--store", "dynamodb://bullpen", "--queue", "sqs://bullpen-",
		"--aws-region", mototest.Region, "--aws-endpoint", "http://127.0.0.1:1", "--listen", "127.0.0.1:0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + home + "/none", "AWS_SHARED_CREDENTIALS_FILE=" + home + "/none",
		"BULLPEN_WEBHOOK_SECRET=s", "BULLPEN_ADMIN_TOKEN=aws-faults-admin-token"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("serve started without AWS credentials")
	}
	if !strings.Contains(string(out), "no usable credentials") || !strings.Contains(string(out), "instance role") {
		t.Fatalf("serve's message does not say the credentials are missing:\n%s", out)
	}
}
