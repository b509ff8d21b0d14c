// Package docs holds the project's documentation (the specifications in docs/spec, the Kafka
// design in design.md, the reliability and performance records) and, in its tests, the checker
// that keeps every section reference in the repository resolvable: a reference must name its
// document (producer §7.3, consumer §3.3, design §3, performance §6.1), the section must have a
// numbered heading there, and nothing may cite a source outside the repository; and the checker
// that keeps the names the documents cite real (test names, paths, Go identifiers, setting
// defaults; names_test.go). The conventions are docs/spec/README.md.
package docs
