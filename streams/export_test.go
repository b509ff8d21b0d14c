package streams

// BytesLengthGrowth is bytesLengthGrowth, for the external tests of the record budget.
const BytesLengthGrowth = bytesLengthGrowth
