// Package membership keeps a replica's place in the fleet: one
// coordination.k8s.io/v1 Lease per replica in the fleet's namespace,
// labelled with the fleet name and named by the replica's identity, renewed
// like client-go's leader election, and a label-selected watch of every
// member's Lease.
//
// It publishes the replica's protocol State (package shard decides what it
// says) in an annotation and reports what it observes of the others. Three
// rules keep the observations honest:
//
//   - Expiry is judged on the observer's own clock, from when it last saw a
//     Lease change, never from timestamps another machine wrote; and a Lease
//     is declared expired only after a fresh read shows it unchanged.
//   - Authority is judged on this replica's monotonic clock: it holds from a
//     successful renewal for RenewDeadline counted from when that renewal
//     was sent. A renewal extends it only if sent while it held (or, on
//     rejoin, with nothing running and no sooner than LeaseDuration -
//     RenewDeadline past its last deadline, when the others would have
//     taken its pieces had it stopped renewing), and only if answered
//     within LeaseDuration-RenewDeadline, so no renewal can land after an
//     observer has already declared the Lease expired.
//   - States older than one already seen from the same incarnation are
//     dropped, so a relist can never take an observation back in time.
//
// The Leases are read and written through a LeaseStore, as client-go's
// leader election keeps its record behind resourcelock.Interface: Member
// (the member Lease, member.go; the others', peers.go) and leaderLease
// (kube-controller-manager's leader Lease, leaderlease.go) decide what to
// write, the store only reads, writes conditionally and watches. Authority
// is computed from both Leases in one place, Member.Authority.
package membership
