-- Tenax schema, version 7: webhook endpoints' delivery state, by origin (scheme, host and
-- port), shared by every subscription pointing there and by every server: a pause the endpoint
-- asked for (429 or 503 with Retry-After) and its circuit breaker. One small row per endpoint
-- that ever paused or tripped, changed only when its state does (never per delivery).
CREATE TABLE tenax_endpoints (
    origin text PRIMARY KEY,
    body   text NOT NULL
);
