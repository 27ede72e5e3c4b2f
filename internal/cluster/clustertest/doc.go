// Package clustertest gives tests of the cluster packages a database of
// their own on a real MySQL-protocol server.
//
// The server is the one at TENURE_TEST_MYSQL_DSN (default
// root@tcp(127.0.0.1:3306)/). Each call creates a database named
// tenure_test_<random>, migrates it and drops it when the test ends. When no
// server answers the test is skipped with a message saying so, except when
// CI is set (CI starts MariaDB): then it fails, so a broken database never
// passes for a green run.
package clustertest
