"""The micro component of examples/muscle3: for each value it receives it relaxes it
towards 2 and sends it back (one micro run per macro step)."""

from libmuscle import Instance, Message
from ymmsl import Operator


def main() -> None:
    instance = Instance({Operator.F_INIT: ["state_in"], Operator.O_F: ["state_out"]})
    runs = 0
    while instance.reuse_instance():
        relax = instance.get_setting("relax", "float")
        msg = instance.receive("state_in")
        value = float(msg.data)
        instance.send("state_out", Message(msg.timestamp, None, value + relax * (2.0 - value)))
        runs += 1
    print(f"micro: {runs} runs", flush=True)


if __name__ == "__main__":
    main()
