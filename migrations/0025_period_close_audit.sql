-- A month closed by finance is in the audit log beside the other operator
-- actions: the period (YYYY-MM) in event_id, 'ledger' in provider, the
-- trial balance's digest in the reason.
ALTER TABLE ops_audit_log DROP CONSTRAINT ops_audit_log_action_check;
ALTER TABLE ops_audit_log ADD CONSTRAINT ops_audit_log_action_check
    CHECK (action IN ('replay', 'bulk_replay', 'discard', 'sweep', 'refund_request', 'refund_failed',
                      'reconciliation_resolve', 'period_close'));
