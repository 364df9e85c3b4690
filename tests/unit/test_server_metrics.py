"""What doctor reads of a team server's /metrics: vLLM's speculation, prefix cache and
running requests, from Prometheus' text as vLLM 0.32 writes it (its metric names are in
vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py); and whether it backs off
under load, from the speculative config its /server_info serves in dev mode."""

from completer.decoders.clients import OpenAIClient
from completer.decoders.server import OpenAIAPI
from completer.decoders.server_metrics import ServerMetrics, parse
from scripted_server import ScriptedServer

SPECULATING = '''# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smol"} 3.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="smol"} 4000.0
vllm:prefix_cache_hits_total{engine="0",model_name="smol"} 3000.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="smol"} 7.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="smol"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="smol"} 5.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="smol"} 50.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="smol"} 200.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smol"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="0"} 48.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="1"} 40.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="2"} 34.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="3"} 28.0
'''


def test_a_speculating_vllm_says_how_deep_what_it_accepted_and_what_it_runs():
    facts = ServerMetrics.of(SPECULATING).described()
    assert facts["drafting"] == "yes, 4 tokens a step"
    assert facts["acceptance so far"] == "75% of 200 drafted tokens"
    assert facts["prefix cache"] == "75% of 4000 prompt tokens found"
    assert facts["requests running"] == "3"
    assert "VLLM_SERVER_DEV_MODE" in facts["backs off under load"]  # no config served: it cannot say


def test_its_served_config_says_whether_it_drafts_less_as_the_batch_grows():
    scheduled = {"method": "ngram", "num_speculative_tokens": 4,
                 "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 256, 0]]}
    facts = ServerMetrics.of(SPECULATING).described(scheduled)
    assert facts["backs off under load"] == "yes, tokens a step by batch size: 1-3 requests: 4, 4-256 requests: 0"
    fixed = ServerMetrics.of(SPECULATING).described({"method": "ngram", "num_speculative_tokens": 4})
    assert fixed["backs off under load"] == "no: 4 tokens a step at every batch size"


def test_a_vllm_without_speculation_and_another_servers_metrics():
    plain = "\n".join(line for line in SPECULATING.splitlines() if "spec_decode" not in line)
    assert ServerMetrics.of(plain).described()["drafting"] == "no (started without --speculative-config)"
    assert "acceptance so far" not in ServerMetrics.of(plain).described()
    assert ServerMetrics.of("llamacpp:prompt_tokens_total 12\n").described() == {"metrics": "none of vLLM's"}


def test_labels_with_commas_and_lines_that_are_not_samples():
    samples = parse('a{x="1,2",y="z"} 3\n# comment\nbroken{\nb 4.5 1700000000\nc{} notanumber\n')
    assert samples == {"a": [({"x": "1,2", "y": "z"}, 3.0)], "b": [({}, 4.5)]}


def test_doctors_line_for_an_openai_server_says_what_its_metrics_say_or_that_it_has_none():
    """What `doctor --decoder openai --server-url URL` prints of the server (ServerModel.summary)."""
    server = ScriptedServer()
    try:
        api = OpenAIAPI(OpenAIClient(server.url))
        summary = api.connect().summary(api.speculation())
        assert "metrics not served (" in summary and "HTTP 404" in summary, summary
        server.metrics = SPECULATING
        summary = api.connect().summary(api.speculation())
        assert "drafting yes, 4 tokens a step, acceptance so far 75% of 200 drafted tokens" in summary, summary
    finally:
        server.stop()


def test_a_connect_asks_only_for_the_served_model():
    """The language server connects at start-up and after every outage; the speculation's
    /metrics and /server_info (vLLM runs its collect_env for it) are doctor's and the bench's."""
    server = ScriptedServer()
    server.metrics = SPECULATING
    try:
        OpenAIAPI(OpenAIClient(server.url)).connect()
        assert server.asked == ["/v1/models"]
    finally:
        server.stop()
