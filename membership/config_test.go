package membership

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func TestConfigValidate(t *testing.T) {
	valid := Config{Client: fake.NewSimpleClientset(), Namespace: "kube-system", Fleet: "fleet", Identity: "replica-0"}.WithDefaults()
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"renew deadline not shorter than lease", func(c *Config) { c.RenewDeadline = c.LeaseDuration }, "lease duration 15s must be longer than its renew deadline"},
		{"retry not shorter than renew deadline", func(c *Config) { c.RetryPeriod = c.RenewDeadline }, "lease renew deadline 10s must be longer than its retry period"},
		{"negative retry", func(c *Config) { c.RetryPeriod = -time.Second }, "must be positive"},
		{"identity not a name", func(c *Config) { c.Identity = "Host_Name" }, "identity"},
		{"empty fleet", func(c *Config) { c.Fleet = "" }, "fleet name must not be empty"},
		{"fleet not a label value", func(c *Config) { c.Fleet = "a/b" }, "fleet name"},
		{"no client or store", func(c *Config) { c.Client, c.Store = nil, nil }, "no Kubernetes client"},
		{"lease over an hour", func(c *Config) { c.LeaseDuration = 2 * time.Hour }, "over an hour"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
			// Flag validation runs before there is a client and skips
			// exactly this error.
			if noStore := tc.name == "no client or store"; errors.Is(err, ErrNoStore) != noStore {
				t.Fatalf("errors.Is(err, ErrNoStore) = %v for %v", !noStore, err)
			}
		})
	}
}
