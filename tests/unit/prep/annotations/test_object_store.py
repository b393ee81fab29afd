"""The stores of an image's objects' texts (`rows.ObjectStore`, `rows.FileStore`): what is put is got back."""

import random

from prep.core.annotations.rows import FileStore, ObjectStore


def test_a_file_store_gives_back_each_text_whatever_the_order_of_puts_and_gets(tmp_path):
    """A listing puts every text and then gets them; a get between puts must not move where the next one goes,
    and positions count UTF-8 bytes, not characters."""
    rng = random.Random(7)
    texts = [
        rng.choice(["", "[]", '{"b":[1,2,3,4],"l":["dög"]}', "ü" * 300, "x" * rng.randint(1, 5000)]) for _ in range(200)
    ]
    memory, files = ObjectStore(), FileStore(str(tmp_path / "objects.jsonl"))
    at: list[int] = []
    for i, text in enumerate(texts):
        at.append(files.put(text))
        assert memory.put(text) == at[-1] == i
        if rng.random() < 0.3:  # a get between puts
            j = rng.randrange(len(at))
            assert files.get(at[j]) == texts[j]
    order = list(range(len(texts)))
    rng.shuffle(order)
    assert [files.get(at[i]) for i in order] == [memory.get(i) for i in order] == [texts[i] for i in order]
    files.close()
    assert (tmp_path / "objects.jsonl").read_bytes() == "".join(texts).encode("utf-8")
