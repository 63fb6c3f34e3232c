-- People sign in to the console through the company's OpenID Connect
-- provider (ARCHITECTURE.md, "People, not shared tokens").
--
-- A person's session holds no token: token_hash is null, and the person is
-- named by their provider (issuer) and its subject, with their email when
-- the provider vouched for one. roles (ops, finance) are what their claim
-- mapped to at sign-in; they are read again only at the next sign-in, so a
-- person removed from a group keeps access until then, never past
-- expires_at. name is what the audit log calls them: the email, else the
-- subject.
ALTER TABLE console_sessions
    ALTER COLUMN token_hash DROP NOT NULL,
    ADD COLUMN issuer  text,
    ADD COLUMN subject text,
    ADD COLUMN email   text,
    ADD CONSTRAINT console_sessions_token_or_person CHECK (
        (token_hash IS NOT NULL AND issuer IS NULL AND subject IS NULL AND email IS NULL)
        OR (token_hash IS NULL AND issuer IS NOT NULL AND subject IS NOT NULL AND subject <> ''));
-- A person's sign-in applies their roles, as their claim now maps, to their
-- other sessions (and ends them when none is left).
CREATE INDEX console_sessions_person ON console_sessions (issuer, subject) WHERE issuer IS NOT NULL;

-- A sign-in on its way through the provider. The browser's short-lived
-- cookie holds the flow's state, nonce and PKCE verifier; this row holds
-- only the SHA-256 of that cookie's value, so that the provider's answer is
-- accepted once (a replayed callback finds no row) and only for a flow
-- this service started. Expired rows are deleted when a flow starts.
CREATE TABLE console_signin_flows (
    flow_hash  bytea PRIMARY KEY CHECK (length(flow_hash) = 32),
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_signin_flows_expires_at ON console_signin_flows (expires_at);
