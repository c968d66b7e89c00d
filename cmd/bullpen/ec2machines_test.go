package main

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// ec2Machines plays the machines of an EC2 emulator, which has none: for
// every running instance with the stack's tag it does what the instance's
// cloud-init would — writes the agent settings from the instance's user
// data and starts `bullpen agent` — and gives the agent a metadata service
// that serves the instance's id and its identity document, signed with a
// test key whose certificate serve is given. A stopped or terminated
// instance's agent is killed, as powering the machine off would.
type ec2Machines struct {
	t          *testing.T
	api        *awsec2.Client
	bin        string
	dir        string
	controller string
	runner     string // the fake runner command
	account    string
	key        *rsa.PrivateKey
	certPath   string // the key's certificate, for --aws-identity-certificate

	mu          sync.Mutex
	cadence     []string // the agents' heartbeat, long-poll and spot-watch flags
	procs       map[string]*ec2Machine
	imds        map[string]*httptest.Server
	interrupted map[string]bool // instances given a spot interruption notice
	stop        chan struct{}
	done        chan struct{}
}

type ec2Machine struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

const motoAccount = "123456789012" // the account moto answers as

// quickCadence has the agents beat, poll and watch for spot notices far
// more often than in production, so that the tests see changes quickly.
var quickCadence = []string{"--heartbeat-interval", "500ms", "--poll-wait", "2s", "--spot-watch-interval", "200ms"}

// useCadence sets the flags the agents of machines booted from now on get
// (nil: the agent's defaults, production's cadence).
func (m *ec2Machines) useCadence(flags ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cadence = flags
}

func newEC2Machines(t *testing.T, api *awsec2.Client, bin, controller, runner string) *ec2Machines {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test instance identity"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := &ec2Machines{t: t, api: api, bin: bin, dir: dir, controller: controller, runner: runner, account: motoAccount,
		key: key, certPath: filepath.Join(dir, "identity.pem"), procs: map[string]*ec2Machine{}, cadence: quickCadence,
		imds: map[string]*httptest.Server{}, interrupted: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := os.WriteFile(m.certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	go m.run()
	t.Cleanup(m.close)
	return m
}

func (m *ec2Machines) run() {
	defer close(m.done)
	// A look a second: the emulator's DescribeInstances walks every
	// instance it ever launched, and more often would make the player the
	// emulator's largest load. EC2 takes longer than that to boot anyway.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		m.sync()
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
	}
}

// sync starts the agents of running instances and kills the others'. It
// lists running instances only: the emulator keeps every terminated one,
// and a listing of all of them grows slow in a long test.
func (m *ec2Machines) sync() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := m.api.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + domain.TagController), Values: []string{m.controller}},
		{Name: aws.String("instance-state-name"), Values: []string{string(types.InstanceStateNameRunning)}}}})
	if err != nil {
		m.t.Logf("machines: describe instances: %v", err)
		return
	}
	running := map[string]bool{}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			running[aws.ToString(in.InstanceId)] = true
		}
	}
	m.mu.Lock()
	procs := maps.Clone(m.procs)
	m.mu.Unlock()
	for id, p := range procs {
		if !running[id] {
			m.powerOff(id, p)
		}
	}
	for id := range running {
		if _, on := procs[id]; on {
			continue
		}
		// Each boot has its own time: a slow emulator must not starve
		// the machines that come after.
		bootCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := m.boot(bootCtx, id)
		cancel()
		if err != nil {
			m.t.Logf("machines: boot %s: %v", id, err)
		}
	}
}

// boot starts id's agent from the settings in its user data.
func (m *ec2Machines) boot(ctx context.Context, id string) error {
	attr, err := m.api.DescribeInstanceAttribute(ctx, &awsec2.DescribeInstanceAttributeInput{
		InstanceId: aws.String(id), Attribute: types.InstanceAttributeNameUserData})
	if err != nil {
		return err
	}
	if attr.UserData == nil || aws.ToString(attr.UserData.Value) == "" {
		return fmt.Errorf("no user data")
	}
	script, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
	if err != nil {
		return err
	}
	env, err := agentSettings(string(script))
	if err != nil {
		return err
	}
	home := filepath.Join(m.dir, id)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	envPath := filepath.Join(home, "agent.env")
	if err := os.WriteFile(envPath, []byte(env), 0o600); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(home, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	m.mu.Lock()
	cadence := m.cadence
	m.mu.Unlock()
	cmd := exec.Command(m.bin, append([]string{"agent", "--config", envPath, "--metadata-url", m.metadata(id),
		"--state-dir", filepath.Join(home, "state"), "--work-dir", home,
		"--runner-command", m.runner + " {jitconfig}", "--shutdown-command", "true"}, cadence...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the runner dies with its machine
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &ec2Machine{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	m.mu.Lock()
	m.procs[id] = p
	m.mu.Unlock()
	return nil
}

// powerOff kills id's agent and everything it started.
func (m *ec2Machines) powerOff(id string, p *ec2Machine) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
	m.mu.Lock()
	delete(m.procs, id)
	m.mu.Unlock()
}

// metadata returns the URL of id's metadata service, started on first use.
func (m *ec2Machines) metadata(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.imds[id]; ok {
		return s.URL
	}
	doc, _ := json.Marshal(map[string]string{"instanceId": id, "region": mototest.Region, "accountId": m.account})
	sum := sha256.Sum256(doc)
	sig, err := rsa.SignPKCS1v15(rand.Reader, m.key, crypto.SHA256, sum[:])
	if err != nil {
		m.t.Errorf("sign the identity document: %v", err)
	}
	answers := map[string]string{
		"/latest/meta-data/instance-id":               id,
		"/latest/dynamic/instance-identity/document":  string(doc),
		"/latest/dynamic/instance-identity/signature": base64.StdEncoding.EncodeToString(sig),
	}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" {
			fmt.Fprint(w, "imds-session")
			return
		}
		if r.URL.Path == "/latest/meta-data/spot/instance-action" && m.isInterrupted(id) {
			fmt.Fprint(w, `{"action": "terminate", "time": "2026-11-24T08:22:00Z"}`)
			return
		}
		v, ok := answers[r.URL.Path]
		if !ok || r.Header.Get("X-aws-ec2-metadata-token") != "imds-session" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, v)
	}))
	m.imds[id] = s
	return s.URL
}

// interrupt gives id a spot interruption notice, as EC2 does two minutes
// before it takes a spot machine back.
func (m *ec2Machines) interrupt(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.interrupted[id] = true
}

func (m *ec2Machines) isInterrupted(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.interrupted[id]
}

func (m *ec2Machines) close() {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	procs := m.procs
	m.procs = map[string]*ec2Machine{}
	m.mu.Unlock()
	for _, p := range procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	for _, s := range m.imds {
		s.Close()
	}
}

// agentSettings returns the agent's environment file from a cloud-init
// script: the single-quoted argument of the printf between the settings
// markers.
func agentSettings(script string) (string, error) {
	_, rest, ok := strings.Cut(script, launchdata.SettingsBegin)
	settings, _, ok2 := strings.Cut(rest, launchdata.SettingsEnd)
	if !ok || !ok2 {
		return "", fmt.Errorf("no agent settings in the user data")
	}
	_, quoted, ok := strings.Cut(settings, "printf '%s' ")
	quoted, _, ok2 = strings.Cut(quoted, ` > "$env_path.tmp"`)
	if !ok || !ok2 || len(quoted) < 2 || quoted[0] != '\'' || quoted[len(quoted)-1] != '\'' {
		return "", fmt.Errorf("the agent settings are not a quoted printf")
	}
	return strings.ReplaceAll(quoted[1:len(quoted)-1], `'\''`, `'`), nil
}
