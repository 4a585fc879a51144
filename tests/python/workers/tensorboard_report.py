"""Reports five steps of metrics on every rank (rank r's loss is (r + 1) / (step + 1)),
with $KOLO_TENSORBOARD_DIR set by the test: only rank 0's go to the event file."""
import kolo.torch as hvd

hvd.init()
for step in range(5):
    hvd.report(step=step, loss=(hvd.rank() + 1) / (step + 1), accuracy=0.5 + step / 10, phase="train",
               done=False)
hvd.shutdown()
