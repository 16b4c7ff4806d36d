import numpy as np, scipy.sparse, time, threading
X = scipy.sparse.random(8192, 100000, 1e-3, format='csr', dtype=np.float32, random_state=0)
W = np.random.default_rng(0).standard_normal((100000, 64)).astype(np.float32)
done = False; count = 0
def work():
    global done
    for _ in range(3): X @ W
    done = True
th = threading.Thread(target=work); s = time.perf_counter(); th.start()
while not done: count += 1
print('counter while scipy ran', count, time.perf_counter() - s)
s = time.perf_counter(); c = 0
while time.perf_counter() - s < 0.3: c += 1
print('counter in 0.3 s alone', c)
