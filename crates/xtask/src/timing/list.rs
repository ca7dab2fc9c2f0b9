//! The timing tests `cargo xtask timing` runs: every test whose verdict
//! rests on a measured time against a truth or a bound that load can break.

/// One timing test: where it lives and its exact name.
#[derive(Debug)]
pub(crate) struct TimingTest {
    pub(crate) package: &'static str,
    /// The `--test` target (a file under the package's `tests/`).
    pub(crate) target: &'static str,
    pub(crate) name: &'static str,
}

const fn t(package: &'static str, target: &'static str, name: &'static str) -> TimingTest {
    TimingTest {
        package,
        target,
        name,
    }
}

/// Tests that start busy loops of their own and compare against a run
/// without them: `--load` runs them idle only in name, so it leaves them
/// out (run them without `--load`; they bring the load).
pub(crate) const OWN_LOAD: &[&str] = &[
    "busy_cores_are_named_as_the_hosts_and_the_servers_uplink_stays_the_network",
    "the_default_demo_beside_busy_cores_shows_the_servers_send_wait_inside_the_downlink_it_delayed",
    "host::stall_clock::tests::a_steady_stall_is_the_kernels_count_within_a_tenth_of_the_call",
];

/// Every test whose verdict rests on a measured time against a truth or a
/// bound that load can break: black-box, clock, split, hop, executor,
/// batching, admission, outage, shutdown and demo tests. A test that only
/// checks a lower bound (a stage took at least the time injected into it)
/// is left out: load only makes such a test easier to pass.
/// `target` "lib" is the package's unit tests (`--lib`); package
/// `stagetrace-py` with target "pytest" is a pytest node of the Python
/// package (run in the venv `cargo xtask test` sets up).
pub(crate) const TESTS: &[TimingTest] = &[
    t(
        "stagetrace",
        "clock_summary",
        "a_server_clock_that_runs_fast_shows_its_drift_in_the_summary",
    ),
    t(
        "stagetrace",
        "api",
        "deadline_figures_without_coordinated_omission",
    ),
    t(
        "stagetrace",
        "black_box",
        "the_first_byte_splits_a_silent_servers_roundtrip_into_ttfb_and_rx",
    ),
    t(
        "stagetrace",
        "tx_wait",
        "the_robots_time_before_its_write_returned_is_tx_wait",
    ),
    t(
        "stagetrace",
        "stage_run_wait",
        "a_capture_span_that_waits_for_a_core_carries_exactly_that_wait",
    ),
    t(
        "stagetrace",
        "records",
        "injected_stage_costs_are_measured_within_1ms",
    ),
    t(
        "stagetrace",
        "windows",
        "windows_roll_in_order_back_to_back_and_count_their_records",
    ),
    t(
        "stagetrace",
        "windows",
        "a_starved_worker_closes_one_window_over_the_stall_and_starts_a_fresh_period",
    ),
    t(
        "stagetrace",
        "lib",
        "stamp::tests::calibrated_stamps_agree_with_instant",
    ),
    t(
        "stagetrace-net",
        "black_box",
        "http_server_without_timing_splits_at_the_first_byte_within_1ms",
    ),
    t(
        "stagetrace-net",
        "black_box",
        "websocket_server_without_timing_splits_at_the_first_byte_within_1ms",
    ),
    t(
        "stagetrace-net",
        "executor",
        "an_executor_busy_on_every_nth_chunk_shows_exactly_that_wait",
    ),
    t(
        "stagetrace-net",
        "executor",
        "behind_a_slow_asymmetric_path_to_a_skewed_executor_the_wait_stays_exact",
    ),
    t(
        "stagetrace-net",
        "executor",
        "through_a_gateway_each_hop_has_its_offset_and_the_gateways_forwarding_is_exec_relay",
    ),
    t(
        "stagetrace-net",
        "executor",
        "a_blocking_client_for_sync_loops",
    ),
    t(
        "stagetrace-net",
        "ws_hop_truth",
        "three_clocks_every_hop_inside_its_bound_and_net_gateway_infer_within_1ms",
    ),
    t(
        "stagetrace-net",
        "ws_hop_truth",
        "drifting_clocks_every_split_and_drift_inside_its_stated_bound",
    ),
    t(
        "stagetrace-net",
        "http_hop_truth",
        "http_relay_three_clocks_every_hop_inside_its_bound_and_relay_time_right",
    ),
    t("stagetrace-net", "proxy", "delays_show_up_in_the_roundtrip"),
    t(
        "stagetrace-net",
        "proxy",
        "bandwidth_limit_paces_a_transfer",
    ),
    t(
        "stagetrace-net",
        "proxy",
        "ground_truth_split_through_the_proxy",
    ),
    t(
        "stagetrace-net",
        "proxy",
        "trusted_clocks_give_the_injected_split",
    ),
    t(
        "stagetrace-otlp",
        "jaeger",
        "an_apps_own_tracing_opentelemetry_trace_is_shared_not_duplicated",
    ),
    t(
        "stagetrace-otlp",
        "jaeger",
        "each_call_is_one_trace_across_client_and_server",
    ),
    t(
        "stagetrace-otlp",
        "jaeger",
        "a_silent_servers_black_box_is_labelled_in_jaeger",
    ),
    t(
        "stagetrace-otlp",
        "jaeger",
        "jaeger_going_away_costs_the_calls_nothing_and_export_resumes",
    ),
    t(
        "stagetrace-otlp",
        "shutdown",
        "two_exporters_and_a_layer_shut_down_within_one_bound_accounting_for_every_record",
    ),
    t(
        "stagetrace-otlp",
        "shutdown",
        "a_layer_finishing_then_dropping_its_exporter_waits_one_bound",
    ),
    t(
        "stagetrace-otlp",
        "shutdown",
        "a_slow_collector_gets_no_new_batch_after_the_deadline",
    ),
    t(
        "stagetrace-otlp",
        "collector",
        "a_collector_that_never_answers_does_not_block_the_caller",
    ),
    t(
        "stagetrace-cli",
        "demo_e2e",
        "ground_truth_skew_250_uplink_20_downlink_5",
    ),
    t(
        "stagetrace-cli",
        "demo_e2e",
        "trusted_clocks_without_skew_give_the_injected_split",
    ),
    t(
        "stagetrace-cli",
        "demo_e2e",
        "server_clock_step_is_detected_and_no_stage_goes_wild",
    ),
    t(
        "stagetrace-cli",
        "demo_e2e",
        "http_transport_traces_the_same_stages",
    ),
    t(
        "stagetrace-cli",
        "demo_host",
        "busy_cores_are_named_as_the_hosts_and_the_servers_uplink_stays_the_network",
    ),
    t(
        "stagetrace-net",
        "host_figures",
        "a_server_thread_sharing_its_core_sends_the_run_queue_wait_it_had",
    ),
    t(
        "stagetrace-cli",
        "demo_hops",
        "gateway_and_executor_every_hop_inside_its_bound_drift_and_busy_waits_exact",
    ),
    t(
        "stagetrace-cli",
        "demo_fleet",
        "two_robots_in_prometheus_and_jaeger_the_slow_one_stands_out",
    ),
    t(
        "stagetrace-cli",
        "demo_otlp_shutdown",
        "demo_with_a_silent_collector_ends_within_its_bound_and_accounts_for_every_record",
    ),
    t(
        "stagetrace-experiment",
        "demo_ramps",
        "network_delay_ramp_moves_uplink_or_downlink_first_and_infer_stays_flat",
    ),
    t(
        "stagetrace-experiment",
        "demo_ramps",
        "downlink_only_delay_is_named_downlink_not_split_in_two",
    ),
    t(
        "stagetrace-experiment",
        "demo_ramps",
        "inference_concurrency_ramp_moves_queue_or_infer_first",
    ),
    t(
        "stagetrace-experiment",
        "demo_ramps",
        "payload_ramp_moves_uplink_first",
    ),
    t(
        "stagetrace-experiment",
        "demo_ramps",
        "client_pause_with_flat_stages_names_the_gap",
    ),
    t(
        "stagetrace-experiment",
        "split_ground_truth",
        "big_uplink_frames_through_a_tbf_bottleneck_split_within_1ms_of_the_truth",
    ),
    t(
        "stagetrace-experiment",
        "split_ground_truth",
        "an_asymmetric_latency_stays_inside_a_bound_no_wider_than_today",
    ),
    t(
        "stagetrace-experiment",
        "kernel_bottleneck",
        "a_tbf_rate_ramp_moves_uplink_first_and_cross_traffic_adds_to_it",
    ),
    t(
        "stagetrace-experiment",
        "command_target",
        "command_target_net_ramp_names_uplink",
    ),
    t(
        "stagetrace-mitigate",
        "admission",
        "admission_bounds_p99_of_admitted_calls_and_sheds_the_rest",
    ),
    t(
        "stagetrace-mitigate",
        "admission",
        "http_admission_sheds_a_full_queue_with_503_and_reports_the_wait_as_queue",
    ),
    t(
        "stagetrace-mitigate",
        "batch_all_in",
        "three_robots_and_max_batch_six_run_as_soon_as_all_three_are_in",
    ),
    t(
        "stagetrace-mitigate",
        "batching",
        "batching_batches_every_call_and_records_show_queue_vs_infer",
    ),
    t(
        "stagetrace-mitigate",
        "cache",
        "repeated_inputs_hit_the_cache_with_unchanged_outputs",
    ),
    t(
        "stagetrace-mitigate",
        "executor",
        "a_stale_action_is_dropped_counted_and_flagged_on_its_record",
    ),
    t("stagetrace-py", "pytest", "tests/test_executor.py::test_rust_robot_to_the_python_executor_shows_exactly_the_busy_calls_wait[direct]"),
    t("stagetrace-py", "pytest", "tests/test_executor.py::test_rust_robot_to_the_python_executor_shows_exactly_the_busy_calls_wait[python-relay]"),
    t("stagetrace-py", "pytest", "tests/test_relay.py::test_rust_client_through_the_python_relay_to_the_rust_server"),
    t("stagetrace-py", "pytest", "tests/test_relay.py::test_rust_client_through_the_python_relay_to_the_python_server"),
    t("stagetrace-py", "pytest", "tests/test_relay_loop.py::test_a_request_that_waits_for_the_relays_blocked_loop_is_the_relays_time_not_its_uplink"),
    t("stagetrace-py", "pytest", "tests/test_server.py::test_in_thread_serves_two_clients_concurrently"),
    t("stagetrace-py", "pytest", "tests/test_lerobot.py::test_every_chunk_is_one_record_and_every_lost_observation_is_counted"),
    t(
        "stagetrace-grpc",
        "async_inference",
        "every_chunk_is_one_split_record_and_every_dropped_observation_is_counted",
    ),
    t(
        "stagetrace-cli",
        "demo_grpc_async",
        "a_queue_that_never_empties_gets_no_verdict_and_the_truth_is_recovered",
    ),
    t(
        "stagetrace-grpc",
        "async_inference",
        "a_unary_call_in_a_call_span_is_split_with_the_servers_timing",
    ),
    // Issue 39: the waits real servers hide, and inference's parts.
    t("stagetrace", "infer_parts", "a_policy_run_in_process_gives_infers_parts_on_its_records"),
    t("stagetrace", "lib", "host::stall_clock::tests::a_steady_stall_is_the_kernels_count_within_a_tenth_of_the_call"),
    t("stagetrace-cli", "blocked_loop", "a_loop_blocked_by_its_own_logging_is_named_log_writing"),
    t("stagetrace-cli", "blocked_loop", "a_loop_blocked_on_a_lock_is_named_a_blocked_wait"),
    t("stagetrace-py", "pytest", "tests/test_log_write.py::test_a_loop_blocked_by_its_own_logging_is_named_log_writing"),
    t("stagetrace-net", "lib", "ws::send_wait_tests::a_send_held_up_on_the_server_is_its_tx_wait_on_exactly_those_records"),
    t(
        "stagetrace-net",
        "infer_parts",
        "a_server_timing_pre_model_and_post_gives_records_whose_parts_add_up_to_infer",
    ),
    t("stagetrace-grpc", "accept_wait", "a_request_waiting_for_a_busy_handler_is_accept_wait_not_uplink"),
    t(
        "stagetrace-cli",
        "demo_host",
        "the_default_demo_beside_busy_cores_shows_the_servers_send_wait_inside_the_downlink_it_delayed",
    ),
    t("stagetrace-py", "pytest", "tests/test_send_wait.py::test_a_servers_held_send_is_server_tx_wait_on_the_delayed_call"),
    t("stagetrace-py", "pytest", "tests/test_event_loop.py::test_two_robots_on_a_blocked_loop_wait_in_queue_not_uplink"),
    t("stagetrace-py", "pytest", "tests/test_event_loop.py::test_a_block_that_ends_on_the_thread_peeks_its_connections"),
    t("stagetrace-py", "pytest", "tests/test_event_loop.py::test_without_a_stamp_tcp_info_gives_a_certain_lower_bound"),
    t("stagetrace-py", "pytest", "tests/test_event_loop.py::test_a_slow_callback_on_the_loop_is_loop_wait"),
    t("stagetrace-py", "pytest", "tests/test_event_loop.py::test_a_long_collection_on_the_thread_ends_with_a_peek"),
    t("stagetrace-py", "pytest", "tests/test_device.py::test_jax_model_stage_without_sync_times_the_dispatch_only"),
    t("stagetrace-py", "pytest", "tests/test_device.py::test_jax_model_stage_with_sync_is_the_functions_own_time"),
    t("stagetrace-py", "pytest", "tests/test_device.py::test_jax_sync_switched_off_process_wide"),
    t("stagetrace-py", "pytest", "tests/test_device.py::test_the_bracket_around_a_policy_waits_for_the_action_it_returns[None]"),
    t("stagetrace-py", "pytest", "tests/test_device.py::test_the_bracket_around_a_policy_waits_for_the_action_it_returns[False]"),
    t("stagetrace-py", "pytest", "tests/test_device.py::test_timed_stage_on_the_robot_ends_when_the_arrays_are_ready[True]"),
    t("stagetrace-py", "pytest", "tests/test_device.py::test_timed_stage_on_the_robot_ends_when_the_arrays_are_ready[False]"),
    t("stagetrace-py", "pytest", "tests/test_accept_wait.py::test_a_request_waiting_for_the_only_worker_is_queue_not_uplink"),
    t("stagetrace-py", "pytest", "tests/test_accept_wait.py::test_with_workers_to_spare_the_wait_is_a_fraction_of_a_ms"),
    t("stagetrace-py", "pytest", "tests/test_accept_wait.py::test_the_report_names_the_starved_pool"),
    t("stagetrace-py", "pytest", "tests/test_robot_send_wait.py::test_a_send_held_up_by_another_python_thread_is_the_robots_tx_wait"),
    t("stagetrace-py", "pytest", "tests/test_grpc.py::test_a_call_that_waits_for_the_only_worker_is_queue_not_uplink"),
    t("stagetrace-py", "pytest", "tests/test_device_torch.py::test_torch_cpu_model_stage_is_its_own_time"),
    t("stagetrace-py", "pytest", "tests/test_lerobot_real.py::test_with_one_worker_the_wait_for_it_is_accept_wait_not_uplink"),
    t("stagetrace-py", "pytest", "tests/test_lerobot_real.py::test_with_workers_to_spare_every_observation_is_one_record"),
];
