package ec2

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Identity checks EC2 instance identity documents: the base64 RSA-SHA256
// signature under AWS's public certificate for the region (AWS publishes
// one per region in the EC2 User Guide, "AWS public certificates for
// instance identity document signatures", the RSA one), and that the
// document names the machine, the region and the account bullpen launches
// in.
type Identity struct {
	key     *rsa.PublicKey
	region  string
	account string // "" when not checked
}

var _ domain.IdentityVerifier = (*Identity)(nil)

// NewIdentity reads the region's certificate (PEM); account may be "".
func NewIdentity(certPEM []byte, region, account string) (*Identity, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("identity certificate: not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("identity certificate: %w", err)
	}
	key, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("identity certificate: not an RSA key (use the region's RSA certificate, not the DSA one)")
	}
	if region == "" {
		return nil, errors.New("identity certificate: no region to check documents against")
	}
	return &Identity{key: key, region: region, account: account}, nil
}

// identityDocument is the part of the document checked.
type identityDocument struct {
	InstanceID string `json:"instanceId"`
	Region     string `json:"region"`
	AccountID  string `json:"accountId"`
}

// Verify accepts a document signed by AWS that names cloudID, in the
// region and account expected.
func (v *Identity) Verify(cloudID, document, signature string) error {
	if document == "" || signature == "" {
		return errors.New("no instance identity document")
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(signature))
	if err != nil {
		return errors.New("the signature is not base64")
	}
	sum := sha256.Sum256([]byte(document))
	if err := rsa.VerifyPKCS1v15(v.key, crypto.SHA256, sum[:], sig); err != nil {
		return errors.New("the document's signature does not verify")
	}
	var doc identityDocument
	if err := json.Unmarshal([]byte(document), &doc); err != nil {
		return errors.New("the document is not JSON")
	}
	switch {
	case doc.InstanceID != cloudID:
		return fmt.Errorf("the document is instance %s's, not %s's", doc.InstanceID, cloudID)
	case doc.Region != v.region:
		return fmt.Errorf("the document is of region %s, not %s", doc.Region, v.region)
	case v.account != "" && doc.AccountID != v.account:
		return fmt.Errorf("the document is of account %s, not %s", doc.AccountID, v.account)
	}
	return nil
}
