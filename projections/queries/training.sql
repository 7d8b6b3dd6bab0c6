-- name: texts
-- The recorded request and response of each selected row's call (a trajectory's last call): gateway row, else runner span.
WITH calls AS (
    SELECT rollout_id, attempt_id, call_id, any_value(request) AS request, any_value(response) AS response
    FROM model_calls GROUP BY rollout_id, attempt_id, call_id
),

span_calls AS (
    SELECT
        rollout_id,
        attempt_id,
        span_id,
        any_value(json_extract_string(attributes, '$."voltbus.llm.request"')) AS request,
        any_value(json_extract_string(attributes, '$."voltbus.llm.response"')) AS response
    FROM spans GROUP BY rollout_id, attempt_id, span_id
)

SELECT
    s.key,
    coalesce(c.request::VARCHAR, p.request) AS request,
    coalesce(c.response::VARCHAR, p.response) AS response
FROM ({selected}) AS s
LEFT JOIN calls AS c ON s.rollout_id = c.rollout_id AND s.attempt_id = c.attempt_id AND s.call_id = c.call_id
LEFT JOIN span_calls AS p ON s.rollout_id = p.rollout_id AND s.attempt_id = p.attempt_id AND s.call_id = p.span_id
ORDER BY s.key
LIMIT $limit OFFSET $offset;
