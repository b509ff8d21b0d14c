// Package queryapi is the HTTP query contract of the indexer: the body types of
// POST /v1/prefix-matches (PrefixMatchRequest, PrefixMatchResponse, DCMatch), its JSON codec
// for the common plain shape, its binary form, the request rules that belong to that route, and
// the conversions between those bodies and the Kafka query records the answerer takes
// (schemas.QueryRequest, schemas.QueryReply). The indexer's handlers (app/indexer), the
// clients (processor query --http, processor loadgen --http, app/loadgen.HTTPQuery) and any
// other service that speaks this route use it, so a reply is mapped in one place and read
// straight into the form the answerer searches.
//
// The package holds no server: no fx, no logging, no routes, no metrics. It imports only the
// standard library, ckf and schemas, so a client takes the contract without the indexer.
//
// # The conversions
//
// Each direction exists once:
//
//   - DecodeRequest: a JSON body to a schemas.QueryRequest (the server). Local block hashes and
//     token ids are read straight into their packed little-endian form (schemas.PackedU64,
//     schemas.PackedU32), which the answerer reads; DecodeBinaryRequest does the same for the
//     binary form, whose body already is that form.
//     DecodeRequestBuf is DecodeRequest packing into a buffer the server keeps between
//     requests.
//   - RequestOf: a schemas.QueryRequest to the JSON body (a client); PrefixMatchRequest.Request
//     is its inverse under the same rules as DecodeRequest (a client that builds a body from
//     its own inputs, processor query's flags).
//   - ResponseOf: a schemas.QueryReply to the JSON body (the server, and processor query's
//     --json output and table, so both paths print alike); ResponseInto is ResponseOf into a
//     response whose lists the server reuses.
//   - PrefixMatchResponse.Reply: the JSON body back to the schemas.QueryReply the Kafka path
//     would have given (a client).
//
// # Rules
//
// The rules of the JSON shape (exactly one input, the token-only fields with token_ids, a lane
// mask of up to 64 bits (consumer §16), no null inside a list, each documented key at most once, no unknown key) and
// of the binary form (a whole number of 8-byte hashes, at most one X-Correlation-Id, only the
// lane_mask parameter) are this package's. The rules a Kafka query shares live in schemas and
// are called from here: the block size (schemas.ValidBlockSize) and the extra keys' count
// (schemas.CheckBlockExtraKeys). The rest of the QueryRequest contract (the correlation id's
// length) is the answerer's, which replies INVALID_REQUEST.
//
// # Stability
//
// The JSON field names, the meaning of absent, null and empty values, the status codes and the
// binary layout are a published contract (app/indexer/http.md): they change only by adding an
// optional field, or, for the binary reply, with a new BinaryReplyVersion. Error texts are for
// people: a caller branches on the status, not on them. The plain codec (parsePlainRequest, appendResponse) gives
// exactly what encoding/json gives for whatever it handles, to the field and to the byte
// (TestPlainRequestMatchesEncodingJSON, FuzzPlainRequest, TestAppendResponseMatchesEncodingJSON,
// FuzzAppendResponse); anything else goes through encoding/json.
package queryapi
