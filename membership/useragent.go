package membership

// UserAgent is the user agent of a replica's requests on behalf of
// component (a controller's client, "membership", "owned-cache"): the
// apiserver's audit log then tells which replica, and which part of it,
// sent each request. A controller's component names the piece it acts
// for before its client's name (PieceComponent), because KCM's client
// names alone are shared by controllers of different pieces
// ("node-controller": node-ipam, node-lifecycle and taint-eviction).
func UserAgent(identity, component string) string {
	return "fleet-controller-manager/" + identity + "/" + component
}

// PartitionControllers stands, in a user agent, for the piece of the
// namespace a partition controller writes into: one client serves every
// partition of the replica.
const PartitionControllers = "partition"

// PieceComponent is the user agent component of client, a controller's
// client acting for piece (a singleton's piece, or PartitionControllers).
func PieceComponent(piece, client string) string {
	return piece + "/" + client
}
