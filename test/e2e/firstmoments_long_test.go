//go:build e2e && long

package e2e

func init() { firstMomentTries = 20 }
