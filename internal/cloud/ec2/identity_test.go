package ec2_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
)

// testSigner stands for AWS: a key and its self-signed certificate.
type testSigner struct {
	key  *rsa.PrivateKey
	cert []byte // PEM
}

func newSigner(t *testing.T) testSigner {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"test"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return testSigner{key: key, cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (s testSigner) sign(t *testing.T, doc string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(doc))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

func doc(instance, region, account string) string {
	return `{"accountId":"` + account + `","architecture":"x86_64","availabilityZone":"` + region + `a",` +
		`"imageId":"ami-1","instanceId":"` + instance + `","instanceType":"c7a.large","region":"` + region + `"}`
}

func TestIdentityDocumentsAreChecked(t *testing.T) {
	aws, forger := newSigner(t), newSigner(t)
	v, err := ec2.NewIdentity(aws.cert, "us-east-1", "123456789012")
	if err != nil {
		t.Fatal(err)
	}
	good := doc("i-0aaaaaaaaaaaaaaaa", "us-east-1", "123456789012")
	if err := v.Verify("i-0aaaaaaaaaaaaaaaa", good, aws.sign(t, good)); err != nil {
		t.Fatalf("a genuine document refused: %v", err)
	}
	for name, tc := range map[string]struct{ cloudID, doc, sig, want string }{
		"a sibling's document":    {"i-0bbbbbbbbbbbbbbbb", good, aws.sign(t, good), "not i-0bbbbbbbbbbbbbbbb's"},
		"another region":          {"i-0aaaaaaaaaaaaaaaa", doc("i-0aaaaaaaaaaaaaaaa", "eu-west-1", "123456789012"), "", "region"},
		"another account":         {"i-0aaaaaaaaaaaaaaaa", doc("i-0aaaaaaaaaaaaaaaa", "us-east-1", "999999999999"), "", "account"},
		"a forged signature":      {"i-0aaaaaaaaaaaaaaaa", good, forger.sign(t, good), "does not verify"},
		"a document edited after": {"i-0aaaaaaaaaaaaaaaa", strings.Replace(good, "c7a", "c7g", 1), aws.sign(t, good), "does not verify"},
		"no document":             {"i-0aaaaaaaaaaaaaaaa", "", "", "no instance identity document"},
	} {
		sig := tc.sig
		if sig == "" && tc.doc != "" {
			sig = aws.sign(t, tc.doc)
		}
		if err := v.Verify(tc.cloudID, tc.doc, sig); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, tc.want)
		}
	}
}

func TestIdentityNeedsTheRSACertificate(t *testing.T) {
	if _, err := ec2.NewIdentity([]byte("not pem"), "us-east-1", ""); err == nil {
		t.Fatal("a file that is not a certificate was accepted")
	}
}
