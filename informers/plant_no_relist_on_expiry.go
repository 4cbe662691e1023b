//go:build plant_no_relist_on_expiry

package informers

func init() { plantedNoRelistOnExpiry = true }
