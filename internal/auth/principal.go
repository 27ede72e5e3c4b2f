package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Role is what a token may do; rules.go says which calls each role may
// make.
type Role string

// The roles.
const (
	// Admin may call everything, in its namespaces.
	Admin Role = "admin"
	// Submitter submits tasks and reads the tasks of its namespaces.
	Submitter Role = "submitter"
	// Worker leases, starts, heartbeats, commits, completes and fails
	// tasks of its queues, and reads them.
	Worker Role = "worker"
	// Reader makes every read: tasks, histories, queues, metrics.
	Reader Role = "reader"
)

// Roles are the roles, in the order the table of docs/guides/security.md lists them.
var Roles = []Role{Admin, Submitter, Worker, Reader}

// ParseRole returns the role named s, or an error listing the roles.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if !slices.Contains(Roles, r) {
		return "", fmt.Errorf("role %q is unknown: use admin, submitter, worker or reader", s)
	}
	return r, nil
}

// All, as the only element of Principal.Namespaces or Queues, means every
// namespace or every queue.
const All = "*"

// Principal is who a token names: its name, role and scope.
type Principal struct {
	// Name is the token's name: the principal recorded as who asked.
	Name string
	Role Role
	// Namespaces the token may act in; [All] for every one.
	Namespaces []string
	// Queues a worker token may act on, in each of its namespaces; [All]
	// for every one. Empty for the other roles: their scope is whole
	// namespaces.
	Queues []string
}

// Target is what a call acts on: a namespace and a queue of it. An empty
// Namespace is every namespace; an empty Queue every queue.
type Target struct{ Namespace, Queue string }

// allowsNamespace reports whether p may act in namespace ns ("" = all).
func (p *Principal) allowsNamespace(ns string) bool {
	return slices.Contains(p.Namespaces, All) || (ns != "" && slices.Contains(p.Namespaces, ns))
}

// allowsQueue reports whether p may act on queue q ("" = all) of its
// namespaces.
func (p *Principal) allowsQueue(q string) bool {
	return len(p.Queues) == 0 || slices.Contains(p.Queues, All) || (q != "" && slices.Contains(p.Queues, q))
}

// unrestricted reports whether p may act on every namespace and queue.
func (p *Principal) unrestricted() bool { return p.allowsNamespace("") && p.allowsQueue("") }

// String describes p for messages: token "ci-bot" (role worker).
func (p *Principal) String() string { return fmt.Sprintf("token %q (role %s)", p.Name, p.Role) }

// scopeText is p's scope for messages: its namespaces, and queues if it
// has them.
func (p *Principal) scopeText() string {
	s := "its namespaces: " + listText(p.Namespaces)
	if len(p.Queues) > 0 {
		s += "; its queues: " + listText(p.Queues)
	}
	return s
}

func listText(l []string) string {
	if slices.Contains(l, All) {
		return "* (every one)"
	}
	return strings.Join(l, ", ")
}
