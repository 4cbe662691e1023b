package membership

// UserAgent is the user agent of a replica's requests on behalf of
// component (a controller's name, "membership", "owned-cache"): the
// apiserver's audit log then tells which replica, and which part of it,
// sent each request.
func UserAgent(identity, component string) string {
	return "fleet-controller-manager/" + identity + "/" + component
}
