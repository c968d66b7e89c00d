package testfixtures

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/config"
)

// TwoEnvironments is a configuration of pool a in environment dev, pool b
// in prod and pool shared in every environment, all of one small runner.
func TwoEnvironments(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Parse("envs.yml", []byte(`runners:
  small:
    image: ubuntu24-full-x64
    ram: 1
    family: [t3]
pools:
  a:
    environment: dev
    runner: small
    schedule:
      - name: default
        hot: 1
  b:
    environment: prod
    runner: small
    schedule:
      - name: default
        hot: 2
  shared:
    runner: small
    schedule:
      - name: default
        stopped: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
