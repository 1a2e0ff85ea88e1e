# memra-bench plot: run `gnuplot THIS_FILE` (svg terminal, no display needed)
set terminal svg size 1200,480 dynamic enhanced font 'sans,11' background rgb 'white'
set output 'h200-9b-q4km-2026-12-03-final.svg'
set multiplot layout 1,2 title 'memra-bench: memra-forge 9b q4_k_m seed 1 (qwen35) on NVIDIA H200 (sm_90, 132 SMs), graph replay' noenhanced
$d0 << EOD
1 242.944 0.317304
2 451.356 0.302687
4 776.885 0.274152
8 1374.75 0.26673
16 1930.53 0.221215
EOD
$d1 << EOD
1 235.548 0.321579
2 424.564 0.309836
4 704.079 0.290112
8 1180.59 0.298901
16 1587.62 0.275844
EOD
$d2 << EOD
1 222.043 0.348178
2 381.163 0.355474
4 598.894 0.368245
8 917.081 0.418197
16 1153.15 0.43425
EOD
set logscale x 2
set xrange [0.8:20]
set xtics (1,2,4,8,16)
set grid
set key top left
set xlabel 'batch tier B'
set ylabel 'tokens/s (all rows)'
set yrange [0:*]
plot $d0 using 1:2 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d1 using 1:2 with linespoints lw 2 pt 7 title 'depth 8192', \
     $d2 using 1:2 with linespoints lw 2 pt 7 title 'depth 32768'
set ylabel 'fraction of copy bandwidth (3970 GB/s)'
set yrange [0:1.05]
plot $d0 using 1:3 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d1 using 1:3 with linespoints lw 2 pt 7 title 'depth 8192', \
     $d2 using 1:3 with linespoints lw 2 pt 7 title 'depth 32768'
unset multiplot
