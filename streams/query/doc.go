// Package query is the query service on Kafka: the Answerer that answers a QueryRequest from the
// global indexer's table, the QueryService (a consumer group on the request topic, replying on
// the reply topic) and the QueryClient that sends requests and waits for their replies. It owns
// their configurations and the query group's membership; fx wiring lives in app/indexer.
package query
