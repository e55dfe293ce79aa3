-- A dashboard session is bound to the token it was opened with, not only the token's name: a
-- token replaced under the same name ends its sessions. `token_tag` is the hex SHA-256 of
-- "settle-session-token:" and the token's configured SHA-256; sessions opened before it carry
-- '' and match no token (their holders log in again).
ALTER TABLE dashboard_sessions ADD COLUMN token_tag TEXT NOT NULL DEFAULT '';
