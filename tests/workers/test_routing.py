from webapp.celery_app import GPU_QUEUE, GPU_TASK_NAMES
from workers.app import app


def _queue_of(task_name: str) -> str:
    route = app.amqp.router.route({}, task_name, args=(), kwargs={})
    return route["queue"].name


def test_model_tasks_go_to_the_gpu_queue_and_the_rest_to_default():
    assert {"workers.tasks.run_training", "workers.tasks.sample_responses",
            "workers.tasks.score_round"} <= set(GPU_TASK_NAMES)
    for name in GPU_TASK_NAMES:
        assert _queue_of(name) == GPU_QUEUE
    assert _queue_of("workers.tasks.health_ping") == "default"


def test_tasks_are_acknowledged_late_and_prefetched_one_at_a_time():
    assert app.conf.task_acks_late is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert {queue.name for queue in app.conf.task_queues} == {"default", "gpu"}


def test_health_task_is_registered():
    assert "workers.tasks.health_ping" in app.tasks
