//go:build plant_unbounded_authority

package membership

func init() { plantedUnboundedAuthority = true }
